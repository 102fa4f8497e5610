"""S-10 (docs/reliability.md): 100 `report` instances pause for review under a queue cap of 5.

Paused instances hold no lease and no slot: all 100 park behind a cap of 5, and a fresh
instance still runs past them. The engines then stop (the restart between pause and resume);
two clients resume every instance at once, exactly one of each pair wins and the other gets
a conflict; new engines run all 100 to completion.
"""

import asyncio

from app.examples import hello, report
from laneway.engine import Engine
from laneway.errors import ConflictError
from laneway.model import EventType, InstanceRecord, Status
from laneway.store import Store, open_store
from tests.engine.helpers import eventually, make_engine
from tests.reliability.conftest import Figure
from tests.reliability.engines import running_engines
from tests.reliability.history import (
    events_by_instance,
    max_overlap,
    run_intervals,
    status_counts,
)
from tests.sizes import size

CAP = 5
INSTANCES = size(100, 500)  # the plan's S-10: 500

LEASES_AND_SLOTS = """
SELECT count(*) FILTER (WHERE status = 'paused') AS paused,
       count(*) FILTER (WHERE status = 'paused' AND (owner_id IS NOT NULL
                                                    OR lease_expires_at IS NOT NULL)) AS leased,
       count(*) FILTER (WHERE status = 'running') AS running
  FROM laneway.instances
 WHERE name = 'report'
"""


async def _report_statuses(engine: Engine) -> list[Status]:
    return [r.status for r in await engine.list_instances(limit=500) if r.name == "report"]


async def _resume_pair(
    first: Engine, second: Engine, record: InstanceRecord
) -> tuple[InstanceRecord | BaseException, InstanceRecord | BaseException]:
    return await asyncio.gather(
        first.resume(record.instance_id), second.resume(record.instance_id), return_exceptions=True
    )


async def test_paused_hold_nothing_and_one_resume_wins_when_100_reports_wait_for_review(
    store: Store, database_url: str, figure: Figure
) -> None:
    client = make_engine(store, report, hello)
    await client.configure_queue("report", concurrency=CAP)
    reviewed = [
        (await client.enqueue("report", {"topic": f"t{n}", "review": True})).instance
        for n in range(INSTANCES)
    ]

    async with running_engines(database_url, 2, report, hello, prefix="before", pool_size=4):
        await eventually(
            lambda: _report_statuses(client),
            lambda statuses: statuses.count(Status.PAUSED) == INSTANCES,
            timeout=60 * size(1, 10),
        )
        async with store.connection() as conn:
            parked = await conn.fetchrow(LEASES_AND_SLOTS)
        unreviewed = await client.enqueue("report", {"topic": "past the parked ones"})
        passed = await client.wait(unreviewed.instance_id, timeout=30)

    async with (
        open_store(database_url, pool_size=10) as first_store,
        open_store(database_url, pool_size=10) as second_store,
    ):
        first, second = make_engine(first_store, report), make_engine(second_store, report)
        pairs = await asyncio.gather(*(_resume_pair(first, second, r) for r in reviewed))

    async with running_engines(database_url, 2, report, hello, prefix="after", pool_size=4):
        await eventually(
            lambda: status_counts(store),
            lambda counts: set(counts) == {Status.COMPLETED},
            timeout=60 * size(1, 10),
        )

    histories = await events_by_instance(store)
    runs = [run for record in reviewed for run in run_intervals(histories[record.instance_id])]
    figure("s10_max_running_reports", max_overlap(runs))
    assert parked is not None
    assert (parked["paused"], parked["leased"], parked["running"]) == (INSTANCES, 0, 0)
    assert passed.status == Status.COMPLETED
    assert max_overlap(runs) <= CAP
    for outcome in pairs:
        assert sum(isinstance(o, InstanceRecord) for o in outcome) == 1, outcome
        assert sum(isinstance(o, ConflictError) for o in outcome) == 1, outcome
    for record in reviewed:
        types = [e.type for e in histories[record.instance_id]]
        assert types.count(EventType.PAUSED) == 1
        assert types.count(EventType.RESUMED) == 1
        assert types.count(EventType.COMPLETED) == 1
    assert len(histories) == 2 * (INSTANCES + 1)  # each report chained one `hello`
