"""The failure write (laneway.write_runner_batch's `failed`): a failed attempt's report replaces
the instance's where it carries one, and is kept where it does not (migration 0036); the
group commit as the release before sends it still works on the migrated schema, also from a
connection that prepared it before the migration (a process of 0.3.8 during a rollout)."""

from collections.abc import AsyncIterator, Sequence

import pytest

from laneway.engine import EnqueueRequest
from laneway.model import InstanceRecord, Status
from laneway.store import Store, open_store, queries
from laneway.store.leases import runner_batch_args
from laneway.writes import CheckpointWrite, FailWrite, RunnerWrite
from tests.engine.helpers import make_engine
from tests.store.schema_before import database_before, prepared_across_migrations
from tests.workflows import noop

OWNER = "failure-writes-test"
REPORTS = "0036_failed_report_on_the_instance"

# The group commit as 0.3.8 sends it: the functions' arguments without the failure reports
# (nor the running stages' reports of 0037).
OLD_BATCH = queries.WRITE_RUNNER_BATCH.replace(
    ", $35, $36, $37, $38, $39, $40, $41) AS w", ") AS w"
)
OLD_BATCH_AND_CLAIM = queries.WRITE_RUNNER_BATCH_AND_CLAIM.replace(
    "$42, $43, $35, $36, $37, $38, $39, $40, $41) AS w", "$35, $36) AS w"
)
OLD_ARGS = 34


def test_the_old_statements_are_the_new_ones_without_the_reports() -> None:
    assert OLD_BATCH != queries.WRITE_RUNNER_BATCH
    assert OLD_BATCH_AND_CLAIM != queries.WRITE_RUNNER_BATCH_AND_CLAIM


async def _running(store: Store, count: int) -> list[InstanceRecord]:
    engine = make_engine(store, noop)
    await engine.enqueue_many([EnqueueRequest(name="noop") for _ in range(count)])
    claimed = await store.claim(OWNER, ["noop@1"], count, 60.0)
    assert len(claimed) == count
    # A report saved by a checkpoint, as a step that went on leaves it.
    checkpoints = [
        CheckpointWrite(
            instance_id=record.instance_id,
            attempt=record.attempts,
            epoch=record.lease_epoch,
            state_json="{}",
            next_action="run",
            next_params_json="null",
            progress=0.25,
            message="checkpointed",
        )
        for record in claimed
    ]
    await store.write_runner_batch(OWNER, 60.0, checkpoints)
    return claimed


def _failed(
    record: InstanceRecord, progress: float | None = None, report: str | None = None
) -> FailWrite:
    return FailWrite(
        instance_id=record.instance_id,
        attempt=record.attempts,
        epoch=record.lease_epoch,
        error="RuntimeError: boom",
        delay_ms=0.0,
        final=True,
        progress=progress,
        report=report,
    )


async def _shown(store: Store, records: Sequence[InstanceRecord]) -> list[tuple[object, ...]]:
    shown: list[tuple[object, ...]] = []
    for record in records:
        found = await store.get_instance(record.instance_id)
        assert found is not None
        shown.append((found.status, found.progress, found.message))
    return shown


@pytest.mark.parametrize("claiming", [False, True])
async def test_a_failure_sets_the_report_it_carries_and_keeps_the_instances_otherwise(
    store: Store, claiming: bool
) -> None:
    reported, silent = await _running(store, 2)
    writes: list[RunnerWrite] = [
        _failed(reported, progress=0.5, report="mid: 1 of 2 operations done (1 failed)"),
        _failed(silent),
    ]
    await store.commit_runner_batch(
        OWNER, 60.0, writes, runs=["noop@1"] if claiming else [], claim_limit=int(claiming)
    )
    assert await _shown(store, [reported, silent]) == [
        (Status.FAILED, 0.5, "mid: 1 of 2 operations done (1 failed)"),
        (Status.FAILED, 0.25, "checkpointed"),
    ]


@pytest.fixture
async def before_reports_url(server_url: str) -> AsyncIterator[str]:
    """A database migrated up to the migration before 0036."""
    async with database_before(server_url, REPORTS) as url:
        yield url


async def test_the_old_group_commit_prepared_before_the_migration_works_after_it(
    before_reports_url: str,
) -> None:
    empty = runner_batch_args(OWNER, 60.0, [])[:OLD_ARGS]
    async with prepared_across_migrations(
        before_reports_url, [OLD_BATCH, OLD_BATCH_AND_CLAIM], empty, [["noop@1"], 0]
    ) as ((batch, batch_and_claim), applied):
        assert applied[0] == REPORTS
        async with open_store(before_reports_url) as store:
            first, second = await _running(store, 2)
            rows = await batch.fetch(*runner_batch_args(OWNER, 60.0, [_failed(first)])[:OLD_ARGS])
            args = runner_batch_args(OWNER, 60.0, [_failed(second)])[:OLD_ARGS]
            rows += await batch_and_claim.fetch(*args, ["noop@1"], 1)
            assert [row["status"] for row in rows] == ["failed", "failed"]
            # As 0.3.8 wrote it: the instance keeps the report its checkpoint saved.
            kept = (Status.FAILED, 0.25, "checkpointed")
            assert await _shown(store, [first, second]) == [kept, kept]
