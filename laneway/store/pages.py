"""The Store's page area: keyset pages of instances, newest first.

Owns the read behind workflowInstancesConnection: a page of summaries after a start key
(created_at, instance_id), in that order descending (queries/pages.py). The cursor a client
holds is the engine's (engine/page_calls.py); the store sees only the key it stands for.
"""

from datetime import datetime
from uuid import UUID

from laneway.model import InstanceFilter, InstanceRecord
from laneway.store import queries
from laneway.store.base import StoreBase
from laneway.store.instances import filter_args
from laneway.store.rows import instance_from_row

PageKey = tuple[datetime, UUID]  # an instance's place in the order: (created_at, instance_id)

# Before every instance created strictly before a time T: (T, the smallest uuid).
_SMALLEST_UUID = UUID(int=0)


def start_key(after: PageKey | None, created_before: datetime | None) -> PageKey | None:
    """Where a walk starts: after `after`, and before `created_before` if that comes later in
    the walk (created_at < T is the same as (created_at, id) < (T, the smallest uuid)), so a
    creation window's end is an index condition, not a filter."""
    if created_before is None:
        return after
    window_end = (created_before, _SMALLEST_UUID)
    return window_end if after is None else min(after, window_end)


class PageStore(StoreBase):
    """Instances in pages that cost the same at any depth."""

    async def page_instances(
        self,
        where: InstanceFilter,
        *,
        limit: int,
        after: PageKey | None = None,
        payloads: bool = True,
    ) -> list[InstanceRecord]:
        """Up to `limit` instances (as summaries, see queries.LIST_INSTANCE_SUMMARIES) that
        match `where`, newest first by (created_at, instance_id), after `after` (None: from the
        newest); without `params`, `result` and `wait` (None, not read) unless `payloads`."""
        start = start_key(after, where.created_before)
        async with self._acquire() as conn, conn.transaction(readonly=True):
            # asyncpg prepares each statement once per connection, and after five runs
            # PostgreSQL may keep a generic plan, one for any values: it cannot fold the
            # filter's `$n IS NULL OR ...` terms, guesses them selective, and then prefers a
            # bitmap scan of every row after the start key and a sort to the index walk that
            # stops after `limit` rows. Planned for its values every time, the page stays a
            # walk; the planning and the transaction cost about 0.5 ms a page
            # (docs/performance.md, bench-pages).
            await conn.execute(queries.CUSTOM_PLANS_HERE)
            rows = await conn.fetch(
                queries.PAGE_INSTANCES if payloads else queries.PAGE_INSTANCES_WITHOUT_PAYLOADS,
                *filter_args(where),
                start[0] if start else None,
                start[1] if start else None,
                limit,
            )
        return [instance_from_row(row) for row in rows]
