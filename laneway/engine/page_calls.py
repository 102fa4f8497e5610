"""The Engine's lists of instances: by offset, and in keyset pages with the opaque cursors that
name a place in them.

A part of Engine (engine.py), kept apart so that each file reads as one area. The order is
newest first by (created_at, instance_id), descending; a cursor is an instance's place in it,
the exact creation time (in microseconds, as PostgreSQL keeps it) and the id, so the next page
starts right after that instance whether or not it still matches, or still exists. The walk
itself is the store's (store/pages.py).
"""

import base64
import binascii
import struct
from datetime import UTC, datetime, timedelta
from uuid import UUID

from laneway.errors import InvalidInputError
from laneway.model import InstanceFilter, InstancePage, InstanceRecord
from laneway.store import Store
from laneway.store.pages import PageKey

MAX_LIST_LIMIT = 500  # an offset list's `limit` (and a list of events')
MAX_PAGE_SIZE = MAX_LIST_LIMIT  # `first`, as for the offset list's limit
MAX_CURSOR_CHARS = 64  # a cursor is 34 characters; anything far longer is not one

_CURSOR_VERSION = 1  # the first byte, so the layout can change without misreading old ones
_LAYOUT = struct.Struct(">Bq16s")  # version, microseconds since the epoch, the id's bytes
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def encode_cursor(record: InstanceRecord) -> str:
    """The opaque cursor of an instance's place in the pages' order."""
    return _encode_key((record.created_at, record.instance_id))


def decode_cursor(cursor: str) -> PageKey:
    """The place a cursor names.

    Raises:
        InvalidInputError: not a cursor this engine made (of any page, any filters).
    """
    bad = InvalidInputError("after is not a cursor from workflowInstancesConnection")
    if not isinstance(cursor, str) or not cursor.isascii() or len(cursor) > MAX_CURSOR_CHARS:
        raise bad
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
        version, micros, id_bytes = _LAYOUT.unpack(raw)
        created_at = _EPOCH + micros * _MICROSECOND
    except (binascii.Error, struct.error, OverflowError, ValueError):
        raise bad from None
    key = (created_at, UUID(bytes=id_bytes))
    # One spelling per place: a cursor that re-encodes differently was not made here.
    if version != _CURSOR_VERSION or _encode_key(key) != cursor:
        raise bad
    return key


def _encode_key(key: PageKey) -> str:
    """base64url, unpadded, of the layout: 34 characters."""
    micros = (key[0] - _EPOCH) // _MICROSECOND
    raw = _LAYOUT.pack(_CURSOR_VERSION, micros, key[1].bytes)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


class PageCalls:
    """Lists of instances, by offset and by keyset pages, on the Engine's store."""

    store: Store

    async def list_instances(
        self,
        where: InstanceFilter | None = None,
        *,
        limit: int = 50,
        offset: int = 0,
        summaries: bool = False,
        payloads: bool = True,
    ) -> list[InstanceRecord]:
        """Instances newest first, as full records unless `summaries`.

        Summaries are the records without their internal `state` (given as {}) and
        `next_params` (None), which the database then neither reads nor sends: what a page the
        API shows needs, as an instance's state may be megabytes. `get` has the full record.
        Unless `payloads`, the records (summaries or full) come without `params`, `result`
        and `wait` (None), which the database then neither reads nor sends: a page whose fields
        show none of them (each may be 256 KiB).

        Raises:
            InvalidInputError: limit outside 1..500, or a negative offset.
        """
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise InvalidInputError(f"limit must be between 1 and {MAX_LIST_LIMIT}")
        if offset < 0:
            raise InvalidInputError("offset must not be negative")
        return await self.store.list_instances(
            where or InstanceFilter(),
            limit=limit,
            offset=offset,
            summaries=summaries,
            payloads=payloads,
        )

    async def page_instances(
        self,
        where: InstanceFilter | None = None,
        *,
        first: int = 50,
        after: str | None = None,
        payloads: bool = True,
    ) -> InstancePage:
        """Up to `first` instances matching `where`, newest first by (creation time, id),
        after the instance the cursor `after` names (None: from the newest), as summaries (see
        list_instances; without their payloads unless `payloads`). Each page costs the same at
        any depth: it starts at the cursor in an index, never counts past the rows before it. A
        walk to the end meets every row that existed when it began exactly once, in order,
        whatever is created meanwhile (new rows are newer than the cursor, so they come before
        it).

        Raises:
            InvalidInputError: `first` outside 1..500, or `after` not a cursor.
        """
        if not 1 <= first <= MAX_PAGE_SIZE:
            raise InvalidInputError(f"first must be between 1 and {MAX_PAGE_SIZE}")
        key = decode_cursor(after) if after is not None else None
        # One row more than asked says whether there is a next page, without a count.
        records = await self.store.page_instances(
            where or InstanceFilter(), limit=first + 1, after=key, payloads=payloads
        )
        shown = records[:first]
        return InstancePage(
            records=shown,
            cursors=[encode_cursor(record) for record in shown],
            has_next=len(records) > first,
        )
