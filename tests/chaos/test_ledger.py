"""The audit trigger and ledger on a real database: a planted stale write is caught end to end.

A control for the chaos tests: if the trigger, the application names or the checker stopped
seeing stale writes, every chaos test would pass vacuously. This plants one on purpose.
"""

from uuid import UUID

import asyncpg
import pytest

from laneway.engine import Engine, WorkflowRegistry
from laneway.store import Store
from laneway.store.pool import connect
from tests.chaos.checker import History, Verdict, check
from tests.chaos.harness import w3_oracle
from tests.chaos.ledger import ALL_EVENTS, LedgerWriter, StoredHistory, install, read_history
from tests.chaos.workflows import LEDGER, w3


async def as_worker(database_url: str, owner: str, sql: str, *args: object) -> None:
    conn = await connect(database_url, application_name=f"laneway-worker-{owner}")
    try:
        await conn.execute(sql, *args)
    finally:
        await conn.close()


def judge(instance_id: UUID, stored: StoredHistory) -> Verdict:
    """The checker on one W3 instance enqueued with {"n": 1}."""
    history = History(
        enqueued={instance_id: {"n": 1}}, stored=stored, lease_seconds=30.0, tick_seconds=2.0
    )
    return check(history, w3_oracle)


CLAIM = (
    "UPDATE laneway.instances SET status = 'running', owner_id = $2,"
    " lease_epoch = lease_epoch + 1, lease_expires_at = now() + interval '30 seconds'"
    " WHERE instance_id = $1"
)
PROGRESS = "UPDATE laneway.instances SET progress = 0.5 WHERE instance_id = $1"


async def test_a_write_by_a_worker_that_does_not_own_the_row_is_reported_stale(
    store: Store, database_url: str, admin: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    await install(admin)
    enqueued = await Engine(store, WorkflowRegistry([w3])).enqueue("w3", {"n": 1})
    instance_id: UUID = enqueued.instance.instance_id
    await as_worker(database_url, "a", CLAIM, instance_id, "a")  # a claim: fine
    await as_worker(database_url, "a", PROGRESS, instance_id)  # the owner writes: fine
    await as_worker(database_url, "b", PROGRESS, instance_id)  # b does not own it: stale
    monkeypatch.setenv("LANEWAY_CHAOS_LEDGER_URL", database_url)
    monkeypatch.setenv("LANEWAY_OWNER_ID", "a")
    ledger = LedgerWriter()
    try:
        await ledger.record(instance_id, "one", 1)
    finally:
        await ledger.close()
    stored = await read_history(admin)
    verdict = judge(instance_id, stored)
    assert [(row.application_name, row.old_owner) for row in verdict.stale_writes] == [
        ("laneway-worker-b", "a")
    ]
    assert [row.timeouts for row in stored.audit] == ["30s/2s/1min"] * 3
    assert [(r.step, r.owner_id) for r in stored.ledger] == [("one", "a")]
    assert verdict.lost == {instance_id}  # still running: the checker says so


async def test_an_instance_the_retention_sweep_deleted_is_judged_from_what_was_kept(
    store: Store, database_url: str, admin: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The soak runs with a short retention: a pruned instance must not read as lost, and its
    # events must still count (terminal and checkpoint events, and for the subscribers).
    await install(admin)
    monkeypatch.setenv("LANEWAY_CHAOS_LEDGER_URL", database_url)
    monkeypatch.setenv("LANEWAY_OWNER_ID", "a")
    engine = Engine(store, WorkflowRegistry([w3]), owner_id="a")
    enqueued = await engine.enqueue("w3", {"n": 1})
    instance_id = enqueued.instance.instance_id
    try:
        while await engine.tick():
            pass
    finally:
        await LEDGER.close()
    events_before = await admin.fetchval(
        "SELECT count(*) FROM laneway.events WHERE instance_id = $1", instance_id
    )
    # As if the queue history roll-up had counted every event: retention waits for it.
    await admin.execute(
        "UPDATE laneway.queue_history_progress"
        " SET last_event_id = (SELECT max(event_id) FROM laneway.events)"
    )
    assert await store.prune_finished(0.0) == 1
    assert await admin.fetchval("SELECT count(*) FROM laneway.instances") == 0

    stored = await read_history(admin)
    kept = stored.instances[instance_id]
    assert (kept.status, kept.terminal_events, kept.checkpoint_events) == ("completed", 1, 2)
    all_events = f"SELECT count(*) FROM ({ALL_EVENTS}) AS e"  # noqa: S608 (a constant)
    assert await admin.fetchval(all_events) == events_before
    verdict = judge(instance_id, stored)
    # (engine.tick() claims at every step boundary, which the checker reads as early reclaims;
    # only the instance's outcome matters here)
    assert verdict.ok == {instance_id}
    assert not verdict.lost
