"""Upkeep as an operator sees it on /metrics: what retention pruned and whether it is behind,
the event partitions added and retired, and the rounds that failed, by task. A failing step is
made to fail in the database itself (a trigger that raises), and must not fail the claim round."""

import logging
from collections.abc import AsyncIterator

import asyncpg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from laneway.engine import WorkflowRegistry
from laneway.engine import upkeep as upkeep_module
from laneway.engine.upkeep import Upkeep
from laneway.metrics import Metrics
from laneway.store import Store, open_store
from tests.engine.helpers import make_engine
from tests.workflows import noop

DAY = 86_400.0

AGE = """
SELECT laneway.add_event_partition(d.day, d.day + interval '1 day')
  FROM (SELECT date_bin(interval '1 day', now() - interval '8 days',
                        timestamptz '2000-01-01 00:00:00+00') AS day) AS d
 WHERE NOT EXISTS (SELECT 1 FROM laneway.event_partitions() AS p WHERE p.lower = d.day);
UPDATE laneway.instances SET finished_at = now() - interval '8 days'
 WHERE status = 'completed';
UPDATE laneway.events SET at = now() - interval '8 days'
 WHERE instance_id IN (SELECT instance_id FROM laneway.instances WHERE status = 'completed');
"""

# Each upkeep step fails in the database, as a lock or statement timeout would make it.
SABOTAGE = """
CREATE FUNCTION laneway.upkeep_sabotage() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN RAISE EXCEPTION 'sabotaged %', TG_TABLE_NAME; END $$;
CREATE TRIGGER sabotage BEFORE DELETE ON laneway.instances
  FOR EACH STATEMENT EXECUTE FUNCTION laneway.upkeep_sabotage();
CREATE TRIGGER sabotage BEFORE UPDATE ON laneway.queue_history_progress
  FOR EACH STATEMENT EXECUTE FUNCTION laneway.upkeep_sabotage();
CREATE FUNCTION laneway.ddl_sabotage() RETURNS event_trigger LANGUAGE plpgsql AS
  $$ BEGIN RAISE EXCEPTION 'sabotaged %', TG_TAG; END $$;
CREATE EVENT TRIGGER laneway_ddl_sabotage ON ddl_command_start
  WHEN TAG IN ('CREATE TABLE') EXECUTE FUNCTION laneway.ddl_sabotage();
"""

REPAIR = """
DROP EVENT TRIGGER laneway_ddl_sabotage;
DROP TRIGGER sabotage ON laneway.instances;
DROP TRIGGER sabotage ON laneway.queue_history_progress;
"""

Scraped = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(metrics: Metrics) -> Scraped:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for sample in family.samples
    }


def failures(scraped: Scraped) -> dict[str, float]:
    return {
        dict(labels)["task"]: value
        for (name, labels), value in scraped.items()
        if name == "laneway_upkeep_failures_total"
    }


async def _drop_future_partitions(store: Store, admin: asyncpg.Connection) -> int:
    """Drop the partitions ahead of today, as if upkeep had not run for days; how many."""
    now = await store.now()
    ahead = [p for p in await store.event_partitions() if p.lower > now]
    for partition in ahead:
        await admin.execute(f'DROP TABLE laneway."{partition.name}"')
    return len(ahead)


@pytest.fixture
def every_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every step at every round: no sweep waits minutes, and none gets a second batch."""
    monkeypatch.setattr(upkeep_module, "PRUNE_SWEEP_SECONDS", 0.0)
    monkeypatch.setattr(upkeep_module, "PRUNE_BEHIND_SECONDS", 0.0)
    monkeypatch.setattr(upkeep_module, "PRUNE_EVERY_SECONDS", 0.0)
    monkeypatch.setattr(upkeep_module, "PARTITIONS_EVERY_SECONDS", 0.0)


@pytest.fixture
async def admin_with_triggers(admin: asyncpg.Connection) -> AsyncIterator[asyncpg.Connection]:
    yield admin
    # The event trigger is the database's, not the schema's: leave none behind.
    await admin.execute("DROP EVENT TRIGGER IF EXISTS laneway_ddl_sabotage")


@pytest.mark.usefixtures("every_round")
async def test_upkeep_counts_what_it_pruned_added_and_retired_and_whether_it_is_behind(
    store: Store, admin: asyncpg.Connection
) -> None:
    metrics = Metrics()
    engine = make_engine(store, noop)
    for _ in range(5):
        await engine.enqueue("noop")
    assert await engine.tick() == 5
    await admin.execute(AGE)
    dropped = await _drop_future_partitions(store, admin)
    assert dropped > 0
    upkeep = Upkeep(store, WorkflowRegistry([noop]), 7 * DAY, prune_batch=2, observer=metrics)

    before = scrape(metrics)
    assert before[("laneway_instances_pruned_total", ())] == 0
    assert before[("laneway_prune_behind", ())] == 0
    assert failures(before) == {"unregistered": 0, "prune": 0, "partitions": 0, "queue_history": 0}

    await upkeep.run()  # one full batch of 2: 3 are left, so it is behind
    first = scrape(metrics)
    assert first[("laneway_instances_pruned_total", ())] == 2
    assert first[("laneway_prune_behind", ())] == 1
    assert first[("laneway_event_partitions_added_total", ())] == dropped
    assert first[("laneway_event_partitions_retired_total", ())] == 0  # 3 still live in it

    await upkeep.run()  # 2 more, still a full batch
    await upkeep.run()  # the last one: a short batch, caught up; its day's partition goes
    last = scrape(metrics)
    assert last[("laneway_instances_pruned_total", ())] == 5
    assert last[("laneway_prune_behind", ())] == 0
    assert last[("laneway_event_partitions_added_total", ())] == dropped
    assert last[("laneway_event_partitions_retired_total", ())] == 1
    assert failures(last) == {"unregistered": 0, "prune": 0, "partitions": 0, "queue_history": 0}


@pytest.mark.usefixtures("every_round")
async def test_a_failing_upkeep_step_is_logged_and_counted_and_the_claim_round_goes_on(
    store: Store, admin_with_triggers: asyncpg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    admin = admin_with_triggers
    setup = make_engine(store, noop)  # another engine ran it: this one has not rolled up yet
    await setup.enqueue("noop")
    assert await setup.tick() == 1
    metrics = Metrics()
    engine = make_engine(store, noop, observer=metrics, retention_seconds=7 * DAY)
    await admin.execute(AGE)
    assert await _drop_future_partitions(store, admin) > 0
    await admin.execute(SABOTAGE)
    waiting = await engine.enqueue("noop")

    with caplog.at_level(logging.WARNING, logger="laneway.engine.upkeep"):
        # A prune that raised used to fail the whole round: nothing was claimed.
        assert await engine.tick() == 1
    ran = await engine.get(waiting.instance_id)
    assert ran is not None
    assert ran.status.value == "completed"
    assert failures(scrape(metrics)) == {
        "unregistered": 0,
        "prune": 1,
        "partitions": 1,
        "queue_history": 1,
    }
    warned = {record.getMessage() for record in caplog.records}
    assert {
        "finished instances prune failed",
        "event partition upkeep failed",
        "queue history roll-up failed",
    } <= warned

    await admin.execute(REPAIR)
    await engine.tick()  # the next round tries again (the roll-up waits for the next minute)
    repaired = scrape(metrics)
    assert repaired[("laneway_instances_pruned_total", ())] == 1
    assert repaired[("laneway_event_partitions_added_total", ())] > 0
    assert failures(repaired)["prune"] == 1
    assert failures(repaired)["partitions"] == 1


@pytest.mark.usefixtures("every_round")
async def test_every_upkeep_step_that_fails_is_logged_and_counted_and_none_escapes(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A database gone away fails each step, the unregistered-workflow check included: it
    used to escape the upkeep and fail the claim round it ran in ("claim round failed")."""
    async with open_store(database_url) as closed:
        pass  # closed: every statement fails, as with a database that went away
    metrics = Metrics()
    upkeep = Upkeep(closed, WorkflowRegistry([noop]), 7 * DAY, observer=metrics)

    with caplog.at_level(logging.WARNING, logger="laneway.engine.upkeep"):
        await upkeep.run()
    assert failures(scrape(metrics)) == {
        "unregistered": 1,
        "prune": 1,
        "partitions": 1,
        "queue_history": 1,
    }
    assert "unregistered workflows check failed" in {r.getMessage() for r in caplog.records}
