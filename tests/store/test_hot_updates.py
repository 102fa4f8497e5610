"""A running instance's checkpoints and lease renewals are HOT updates (migrations/0027): they
write no index entry, because no index of laneway.instances reads a column they change."""

import asyncpg

from laneway.engine import EnqueueRequest
from laneway.store import Store, queries
from laneway.store.leases import runner_batch_args
from laneway.writes import CheckpointWrite
from tests.engine.helpers import make_engine
from tests.workflows import noop

OWNER = "hot-test"

# What a checkpoint that keeps its instance running, and a renewal, change
# (laneway.write_runner_batch's `checkpointed`, queries.RENEW_LEASES).
RUNNING_UPDATE_COLUMNS = {
    "state",
    "next_action",
    "next_params",
    "progress",
    "message",
    "stage",
    "checkpoint",
    "wait",
    "wait_signal",
    "attempt_base",
    "lease_expires_at",
    "lease_renewed_at",
    "updated_at",
}


async def test_no_index_of_instances_reads_a_column_a_running_update_changes(
    admin: asyncpg.Connection,
) -> None:
    # Key columns, expressions and predicates alike: a change to any of them makes an update
    # write every index.
    rows = await admin.fetch(
        "SELECT c.relname AS index, a.attname AS column"
        "  FROM pg_index AS x"
        "  JOIN pg_class AS c ON c.oid = x.indexrelid"
        "  JOIN pg_attribute AS a ON a.attrelid = x.indrelid AND a.attnum > 0"
        " WHERE x.indrelid = 'laneway.instances'::regclass"
        "   AND (a.attnum = ANY(x.indkey)"
        "        OR pg_get_expr(x.indpred, x.indrelid) ~ ('\\m' || a.attname || '\\M')"
        "        OR pg_get_expr(x.indexprs, x.indrelid) ~ ('\\m' || a.attname || '\\M'))"
    )
    indexed = {(row["index"], row["column"]) for row in rows}
    assert ("instances_running", "queue") in indexed  # the query does find indexed columns
    assert {
        (index, column) for index, column in indexed if column in RUNNING_UPDATE_COLUMNS
    } == set()


async def test_a_checkpoint_and_a_renewal_are_hot_updates(
    store: Store, admin: asyncpg.Connection
) -> None:
    engine = make_engine(store, noop)
    await engine.enqueue_many([EnqueueRequest(name="noop") for _ in range(3)])
    claimed = await store.claim(OWNER, ["noop@1"], 3, 60.0)
    assert len(claimed) == 3
    checkpoints = [
        CheckpointWrite(
            instance_id=record.instance_id,
            attempt=record.attempts,
            epoch=record.lease_epoch,
            state_json='{"step": 1}',
            next_action="run",
            next_params_json="null",
            progress=0.5,
            message="half way",
            stage="first",
        )
        for record in claimed
    ]
    ids = [record.instance_id for record in claimed]
    epochs = [record.lease_epoch for record in claimed]
    async with admin.transaction():  # the counts below are this transaction's own
        written = await admin.fetch(
            queries.WRITE_RUNNER_BATCH, *runner_batch_args(OWNER, 60.0, checkpoints)
        )
        renewed = await admin.fetch(queries.RENEW_LEASES, OWNER, ids, epochs, 60.0)
        counts = await admin.fetchrow(
            "SELECT pg_stat_get_xact_tuples_updated(r), pg_stat_get_xact_tuples_hot_updated(r)"
            "  FROM CAST('laneway.instances' AS regclass) AS r"
        )
    assert [row["status"] for row in written] == ["running"] * 3
    assert len(renewed) == 3
    assert counts is not None
    assert tuple(counts) == (6, 6)  # every update, and every one of them HOT
    rows = await admin.fetch(
        "SELECT state, stage, message FROM laneway.instances WHERE instance_id = ANY($1)", ids
    )
    assert {(row["stage"], row["message"]) for row in rows} == {("first", "half way")}
