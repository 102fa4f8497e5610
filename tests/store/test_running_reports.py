"""The report of a template stage still running (laneway.write_runner_batch's `reported`,
migration 0037): a write of operation outcomes on their own carries it to the instance, fenced
by owner and lease epoch, once per instance, and never over the report of a step write of the
same instance in the batch; the group commit as 0.3.10 sends it (without the reports) still
resolves and writes on the migrated schema, also from a connection that prepared it before the
migration (a process of 0.3.10 during a rollout)."""

import time
import uuid
from collections.abc import AsyncIterator
from datetime import datetime

import pytest

from laneway.engine import EnqueueRequest
from laneway.model import InstanceRecord, OperationRecord, Status
from laneway.store import Store, open_store, queries
from laneway.store.leases import runner_batch_args
from laneway.store.migrate import apply_migrations
from laneway.store.pool import connect
from laneway.writes import CheckpointWrite, OperationOutcome, OperationsWrite, RunnerWrite
from tests.engine.helpers import make_engine, types_of
from tests.store.schema_before import database_before, prepared_across_migrations
from tests.workflows import noop

OWNER = "running-reports-test"
RUNNING_REPORTS = "0037_running_report_on_the_instance"

# The group commit as 0.3.9 and 0.3.10 send it: the functions' arguments without the running
# stages' reports (and the claim's run keys and limit right after the batch's, as $37, $38).
OLD_BATCH = queries.WRITE_RUNNER_BATCH.replace(", $37, $38, $39, $40, $41) AS w", ") AS w")
OLD_BATCH_AND_CLAIM = queries.WRITE_RUNNER_BATCH_AND_CLAIM.replace(
    "$42, $43, $35, $36, $37, $38, $39, $40, $41) AS w", "$37, $38, $35, $36) AS w"
)
OLD_ARGS = 36


def test_the_old_statements_are_the_new_ones_without_the_running_reports() -> None:
    assert OLD_BATCH != queries.WRITE_RUNNER_BATCH
    assert OLD_BATCH_AND_CLAIM != queries.WRITE_RUNNER_BATCH_AND_CLAIM


async def _running(store: Store, count: int) -> list[InstanceRecord]:
    """`count` instances claimed by OWNER, each with the report a checkpoint saved."""
    engine = make_engine(store, noop)
    await engine.enqueue_many([EnqueueRequest(name="noop") for _ in range(count)])
    claimed = await store.claim(OWNER, ["noop@1"], count, 60.0)
    assert len(claimed) == count
    await store.write_runner_batch(OWNER, 60.0, [_checkpoint(record) for record in claimed])
    return claimed


def _checkpoint(
    record: InstanceRecord, stage: str = "first", message: str = "first: 1 of 1 operations done"
) -> CheckpointWrite:
    return CheckpointWrite(
        instance_id=record.instance_id,
        attempt=record.attempts,
        epoch=record.lease_epoch,
        state_json="{}",
        next_action="run",
        next_params_json="null",
        progress=0.5,
        message=message,
        stage=stage,
    )


def _outcome(record: InstanceRecord, position: int) -> OperationOutcome:
    return OperationOutcome(
        record=OperationRecord(
            operation_id=uuid.uuid4(),
            instance_id=record.instance_id,
            stage="analyze",
            position=position,
            type="work",
            status="completed",
            attempts=1,
            error=None,
            data=None,
            metadata=None,
            started_at=None,
            finished_at=None,
        ),
        data_json="null",
        metadata_json="null",
        seconds=0.01,
        finished_at=time.monotonic(),
    )


def _operations(
    record: InstanceRecord,
    done: int,
    *,
    owner_epoch: int | None = None,
    reported: bool = True,
) -> OperationsWrite:
    """The outcome of operation `done` - 1 of stage `analyze` (of 3), with the report of `done`
    operations done when `reported`."""
    return OperationsWrite(
        instance_id=record.instance_id,
        epoch=record.lease_epoch if owner_epoch is None else owner_epoch,
        operations=(_outcome(record, done - 1),),
        stage="analyze" if reported else None,
        progress=0.5 + done / 6 if reported else None,
        message=f"analyze: {done} of 3 operations done" if reported else None,
    )


async def _shown(store: Store, record: InstanceRecord) -> tuple[object, ...]:
    found = await store.get_instance(record.instance_id)
    assert found is not None
    return found.status, found.stage, found.progress, found.message


async def _updated_at(store: Store, record: InstanceRecord) -> datetime:
    found = await store.get_instance(record.instance_id)
    assert found is not None
    return found.updated_at


@pytest.mark.parametrize("claiming", [False, True])
async def test_an_operations_write_sets_the_running_stages_report_and_makes_no_event(
    store: Store, claiming: bool
) -> None:
    [record] = await _running(store, 1)
    before = await _updated_at(store, record)
    events_before = await types_of(store, record.instance_id)
    writes: list[RunnerWrite] = [_operations(record, 1)]
    await store.commit_runner_batch(
        OWNER, 60.0, writes, runs=["noop@1"] if claiming else [], claim_limit=int(claiming)
    )
    assert await _shown(store, record) == (
        Status.RUNNING,
        "analyze",
        pytest.approx(0.5 + 1 / 6),
        "analyze: 1 of 3 operations done",
    )
    assert len(await store.operations(record.instance_id)) == 1
    # A change users see, so the instance's last change moves; but no step, so no event.
    assert await _updated_at(store, record) > before
    assert await types_of(store, record.instance_id) == events_before


async def test_an_operations_write_without_a_report_keeps_the_instances(store: Store) -> None:
    [record] = await _running(store, 1)
    await store.write_runner_batch(OWNER, 60.0, [_operations(record, 1, reported=False)])
    assert await _shown(store, record) == (
        Status.RUNNING,
        "first",
        0.5,
        "first: 1 of 1 operations done",
    )
    assert len(await store.operations(record.instance_id)) == 1


async def test_a_report_from_an_owner_that_lost_its_lease_changes_nothing(store: Store) -> None:
    stale, held = await _running(store, 2)
    # `stale`'s lease was taken over (a recovery and a claim bump its epoch); `held` is ours,
    # but this write names another owner.
    transitions = await store.write_runner_batch(
        OWNER, 60.0, [_operations(stale, 1, owner_epoch=stale.lease_epoch + 1)]
    )
    transitions += await store.write_runner_batch("someone-else", 60.0, [_operations(held, 1)])
    assert transitions == []  # fenced out: the runner's write raises LeaseLostError
    unchanged = (Status.RUNNING, "first", 0.5, "first: 1 of 1 operations done")
    assert await _shown(store, stale) == unchanged
    assert await _shown(store, held) == unchanged
    assert await store.operations(stale.instance_id) == []
    # The same write from the owner, under its lease, does set it.
    await store.write_runner_batch(OWNER, 60.0, [_operations(held, 1)])
    assert (await _shown(store, held))[1:] == (
        "analyze",
        pytest.approx(0.5 + 1 / 6),
        "analyze: 1 of 3 operations done",
    )


@pytest.mark.parametrize("step_first", [False, True])
async def test_a_step_write_in_the_same_batch_keeps_its_own_report(
    store: Store, step_first: bool
) -> None:
    [record] = await _running(store, 1)
    step = _checkpoint(record, stage="analyze", message="analyze: 3 of 3 operations done")
    outcomes = _operations(record, 2)
    writes: list[RunnerWrite] = [step, outcomes] if step_first else [outcomes, step]
    transitions = await store.write_runner_batch(OWNER, 60.0, writes)
    assert [t.status for t in transitions][-1] == Status.RUNNING  # the checkpoint applied
    assert await _shown(store, record) == (
        Status.RUNNING,
        "analyze",
        0.5,
        "analyze: 3 of 3 operations done",
    )
    assert len(await store.operations(record.instance_id)) == 1  # the outcome is written


async def test_two_operations_writes_of_one_instance_in_a_batch_leave_the_latest_report(
    store: Store,
) -> None:
    [record] = await _running(store, 1)
    await store.write_runner_batch(OWNER, 60.0, [_operations(record, 1), _operations(record, 2)])
    assert (await _shown(store, record))[3] == "analyze: 2 of 3 operations done"
    assert len(await store.operations(record.instance_id)) == 2


@pytest.fixture
async def before_running_reports_url(server_url: str) -> AsyncIterator[str]:
    """A database migrated up to the migration before 0037 (the schema of 0.3.9 and 0.3.10)."""
    async with database_before(server_url, RUNNING_REPORTS) as url:
        yield url


async def test_the_old_group_commit_prepared_before_the_migration_works_after_it(
    before_running_reports_url: str,
) -> None:
    empty = runner_batch_args(OWNER, 60.0, [])[:OLD_ARGS]
    async with prepared_across_migrations(
        before_running_reports_url, [OLD_BATCH, OLD_BATCH_AND_CLAIM], empty, [["noop@1"], 0]
    ) as ((batch, batch_and_claim), applied):
        assert applied == [RUNNING_REPORTS]
        async with open_store(before_running_reports_url) as store:
            first, second = await _running(store, 2)
            args = runner_batch_args(OWNER, 60.0, [_operations(first, 1)])[:OLD_ARGS]
            rows = await batch.fetch(*args)
            args = runner_batch_args(OWNER, 60.0, [_operations(second, 1)])[:OLD_ARGS]
            rows += await batch_and_claim.fetch(*args, ["noop@1"], 1)
            assert [row["status"] for row in rows] == ["running", "running"]
            for record in (first, second):
                assert len(await store.operations(record.instance_id)) == 1
                # As 0.3.10 wrote it: the instance keeps the report its checkpoint saved.
                assert await _shown(store, record) == (
                    Status.RUNNING,
                    "first",
                    0.5,
                    "first: 1 of 1 operations done",
                )


async def test_the_migration_applies_again_where_its_record_was_deleted(
    before_running_reports_url: str,
) -> None:
    # An upgrade audit: deleting the migration's row by hand (a downgrade the docs do not allow)
    # and migrating again failed, the old signatures it drops being gone already.
    conn = await connect(before_running_reports_url)
    try:
        assert await apply_migrations(conn) == [RUNNING_REPORTS]
        await conn.execute("DELETE FROM laneway.schema_migrations WHERE name = $1", RUNNING_REPORTS)
        assert await apply_migrations(conn) == [RUNNING_REPORTS]
    finally:
        await conn.close()
