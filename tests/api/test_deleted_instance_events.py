"""An instance deleted by retention has no events to read: its history, its replay and its
`events` field are empty, as `workflowInstance` is null, although its event rows stay in
their day's partition until the partition is dropped."""

import asyncio
import json
from collections.abc import AsyncGenerator
from typing import Any
from uuid import UUID

from laneway.api.graphql.context import laneway_context
from laneway.api.graphql.schema import schema
from laneway.model import EventType, Status
from laneway.services import Services
from laneway.store import queries
from laneway.store.base import EVENTS_LOCK_KEY
from tests.api.conftest import Execute, wait_until

HISTORY = """query ($id: ID!) {
  workflowInstance(instanceID: $id) { status }
  workflowEventHistory(instanceID: $id) { eventID }
}"""


async def _finished_then_deleted(run: Execute, services: Services) -> str:
    """An instance of `noop` that ran, ended and was deleted by retention; its events are
    still rows of a partition."""
    assert services.store is not None
    await services.store.add_event_partitions()
    result = await run('mutation { enqueueWorkflow(name: "noop") { instanceID } }')
    assert result.data is not None
    instance_id: str = result.data["enqueueWorkflow"]["instanceID"]

    async def finished() -> bool:
        record = await services.engine.get(UUID(instance_id))
        return record is not None and record.status == Status.COMPLETED

    await wait_until(finished)
    before = await run(HISTORY, id=instance_id)
    assert before.data is not None
    assert len(before.data["workflowEventHistory"]) == 3
    async with services.store.connection() as conn:
        # As if the queue history roll-up had counted its events: retention waits for it.
        await conn.execute(
            "UPDATE laneway.queue_history_progress"
            " SET last_event_id = (SELECT max(event_id) FROM laneway.events)"
        )
    assert await services.store.prune_finished(0.0) == 1
    async with services.store.connection() as conn:
        kept = await conn.fetchval(
            "SELECT count(*) FROM laneway.events WHERE instance_id = $1", UUID(instance_id)
        )
    assert kept == 3
    return instance_id


async def test_the_history_of_a_deleted_instance_is_empty(run: Execute, services: Services) -> None:
    instance_id = await _finished_then_deleted(run, services)
    result = await run(HISTORY, id=instance_id)
    assert result.data == {"workflowInstance": None, "workflowEventHistory": []}
    assert await services.store.latest_instance_events(UUID(instance_id), 100) == []


async def test_a_subscription_to_a_deleted_instance_replays_nothing(
    run: Execute, services: Services
) -> None:
    instance_id = await _finished_then_deleted(run, services)
    context = await laneway_context(services, None)
    stream = await schema.subscribe(
        """subscription ($id: ID!) {
          workflowEvents(instanceID: $id, afterEventID: "0") { eventID type } }""",
        variable_values={"id": instance_id},
        context_value=context,
    )
    assert isinstance(stream, AsyncGenerator)
    first_result: asyncio.Task[Any] = asyncio.create_task(anext(stream))

    async def subscribed() -> bool:
        return services.hub.subscriber_count == 1

    await wait_until(subscribed)
    # No instance appends events once it is deleted: this one is written by hand so that the
    # stream has something to deliver live, and its first event shows whether the replay
    # gave any before it.
    async with services.store.connection() as conn:
        marker = await conn.fetchval(
            queries.APPEND_EVENTS,
            EVENTS_LOCK_KEY,
            [UUID(instance_id)],
            ["noop"],
            [EventType.SIGNALLED.value],
            [Status.COMPLETED.value],
            [1],
            [None],
            [None],
            [None],
            None,
            ["marker"],
        )
    async with asyncio.timeout(15):
        first: Any = await first_result
    await stream.aclose()
    assert first.errors is None, json.dumps(first.errors)
    assert first.data == {"workflowEvents": {"eventID": str(marker), "type": "signalled"}}


async def test_reading_one_instance_probes_its_primary_key_once_then_reads_its_index(
    run: Execute, services: Services
) -> None:
    instance_id = await _finished_then_deleted(run, services)
    async with services.store.connection() as conn:
        # Enough events of other instances that a scan of the log would cost the most.
        await conn.execute(
            "INSERT INTO laneway.events (instance_id, name, type, status)"
            " SELECT gen_random_uuid(), 'noop', 'enqueued', 'pending'"
            "   FROM generate_series(1, 20000)"
        )
        await conn.execute("ANALYZE laneway.events")
        filled = await conn.fetchval(
            "SELECT tableoid::regclass::text FROM laneway.events ORDER BY event_id DESC LIMIT 1"
        )
        plans = {
            "replay": await conn.fetch(
                "EXPLAIN (COSTS OFF) " + queries.INSTANCE_EVENTS_AFTER, UUID(instance_id), 0, 500
            ),
            "newest": await conn.fetch(
                "EXPLAIN (COSTS OFF) " + queries.LATEST_INSTANCE_EVENTS, UUID(instance_id), 100
            ),
        }
    for name, rows in plans.items():
        plan = "\n".join(row[0] for row in rows)
        # The EXISTS is evaluated once (an InitPlan gating each partition's scan), not per row.
        assert "InitPlan 1" in plan, (name, plan)
        assert "One-Time Filter" in plan, (name, plan)
        assert "instance_id_event_id_idx" in plan, (name, plan)
        assert f"Seq Scan on {filled.removeprefix('laneway.')}" not in plan, (name, plan)
