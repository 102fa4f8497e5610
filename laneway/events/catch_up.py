"""CatchUpReads: the event table pages that streams read for themselves, bounded and shared.

Owns how a stream reads the table when the hub's live feed is not enough: its replay after
`afterEventID`, and its catch-up after its queue overflowed. A burst of events can leave
every subscriber of a process behind at once; each reading on its own took every connection
of the pool, so enqueues and requests waited for one until they failed, and so did most of
the reads, which then ended their subscriptions as if the database were down. Here:

- at most `limit` of these reads run at once per hub (by default a fifth of the pool, at
  least one: reads_for_pool); the others wait their turn, which is not a failure;
- a full page (PAGE_SIZE events) is remembered, the last SHARED_PAGES of them, and handed to
  the next streams that ask for it: ids become visible in id order (the append lock,
  queries.APPEND_EVENTS), so no later commit can change a full page, and streams behind at
  the same position read it once (the hub's reader offers its own full pages too);
- a read that fails for want of a connection or of the database is tried again with backoff
  until it succeeds or its stream ends: a stream never ends for being slow.

Does not decide which events a stream delivers, or when it reads (hub.py).
"""

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Sequence
from uuid import UUID

from laneway.events.backend import CONNECTION_ERRORS
from laneway.model import EventRecord
from laneway.store import Store

logger = logging.getLogger(__name__)

PAGE_SIZE = 500
POOL_SHARE = 5  # catch-up reads take at most a fifth of the pool (LANEWAY_POOL_SIZE), and one
SHARED_PAGES = 16
RETRY_MIN_SECONDS = 0.05  # a failed table read is tried again after this, doubling to the
RETRY_MAX_SECONDS = 5.0  # most: the hub's own reader backs off the same way (hub.py)

PageKey = tuple[UUID | None, int]  # (the instance read, or None for every event; after id)


def reads_for_pool(capacity: int) -> int:
    """How many catch-up reads a pool of `capacity` connections lends at once: a fifth of it,
    at least one (2 of the default 10; at the smallest pool, 2, one is always left)."""
    return max(1, capacity // POOL_SHARE)


class CatchUpReads:
    """The table reads of one hub's streams: at most `limit` at once, full pages shared."""

    def __init__(self, store: Store, *, limit: int) -> None:
        if limit < 1:
            raise ValueError("at least one catch-up read must be allowed")
        self._store = store
        self._slots = asyncio.Semaphore(limit)
        self._pages: OrderedDict[PageKey, Sequence[EventRecord]] = OrderedDict()

    async def page(
        self, instance_id: UUID | None, after_event_id: int, ended: asyncio.Event
    ) -> Sequence[EventRecord] | None:
        """Up to PAGE_SIZE events after `after_event_id` in id order (of one instance, or all);
        None if `ended` is set while a failed read waits to be tried again."""
        delay = RETRY_MIN_SECONDS
        while True:
            try:
                return await self._read(instance_id, after_event_id)
            except CONNECTION_ERRORS as error:
                if delay == RETRY_MIN_SECONDS:  # once per run of failures, not per attempt
                    logger.warning(
                        "event catch-up read failed; trying again", extra={"error": repr(error)}
                    )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await ended.wait()
            if ended.is_set():
                return None
            delay = min(delay * 2, RETRY_MAX_SECONDS)

    def offer(self, after_event_id: int, page: Sequence[EventRecord]) -> None:
        """A page of every event that the hub's reader read, for streams behind at its start."""
        self._remember((None, after_event_id), page)

    async def _read(self, instance_id: UUID | None, after_event_id: int) -> Sequence[EventRecord]:
        key = (instance_id, after_event_id)
        remembered = self._remembered(key)
        if remembered is not None:
            return remembered
        async with self._slots:
            remembered = self._remembered(key)  # read for another stream while this one waited
            if remembered is not None:
                return remembered
            if instance_id is None:
                page = await self._store.events_after(after_event_id, PAGE_SIZE)
            else:  # what the stream can match, not every event after its position
                page = await self._store.instance_events_after(
                    instance_id, after_event_id, PAGE_SIZE
                )
        self._remember(key, page)
        return page

    def _remembered(self, key: PageKey) -> Sequence[EventRecord] | None:
        page = self._pages.get(key)
        if page is not None:
            self._pages.move_to_end(key)
        return page

    def _remember(self, key: PageKey, page: Sequence[EventRecord]) -> None:
        if len(page) < PAGE_SIZE:  # a short page can grow: later commits join its end
            return
        self._pages[key] = tuple(page)
        self._pages.move_to_end(key)
        if len(self._pages) > SHARED_PAGES:
            self._pages.popitem(last=False)
