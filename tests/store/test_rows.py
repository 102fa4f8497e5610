"""Row decoding: instance_from_row, which fills an InstanceRecord's slots without its __init__,
builds the very record __init__ builds, from full rows and from summaries."""

import dataclasses
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from laneway.engine.requests import EnqueueRequest, new_instance
from laneway.model import InstanceRecord, Status
from laneway.store import Store, queries
from laneway.store.rows import instance_from_row, new_instance_record
from tests.engine.helpers import make_engine
from tests.workflows import noop


def _by_init(row: asyncpg.Record) -> InstanceRecord:
    """The record as InstanceRecord's own __init__ builds it from `row`."""
    values: dict[str, Any] = {f.name: row[f.name] for f in dataclasses.fields(InstanceRecord)}
    values["status"] = Status(values["status"])
    values["state"] = values["state"] if values["state"] is not None else {}
    return InstanceRecord(**values)


def test_instance_record_fields_are_the_instance_columns() -> None:
    columns = [name.strip() for name in queries.INSTANCE_COLUMNS.split(",")]
    assert sorted(columns) == sorted(field.name for field in dataclasses.fields(InstanceRecord))
    assert not hasattr(InstanceRecord, "__post_init__")  # nothing that __init__ would run


@pytest.mark.parametrize(
    "statement",
    [
        "LIST_INSTANCES",
        "LIST_INSTANCES_WITHOUT_PAYLOADS",
        "LIST_INSTANCE_SUMMARIES",
        "LIST_INSTANCE_SUMMARIES_WITHOUT_PAYLOADS",
    ],
)
async def test_instance_from_row_builds_the_record_init_builds(
    store: Store, admin: asyncpg.Connection, statement: str
) -> None:
    engine = make_engine(store, noop)
    fresh = await engine.enqueue("noop", params={"n": 1}, idempotency_key="k")
    busy = await engine.enqueue("noop", params={"n": 2})
    # Every column of `busy` not NULL, so no field can come out right by being None.
    await admin.execute(
        """
        UPDATE laneway.instances
           SET status = 'running', owner_id = 'w1', lease_expires_at = now(), lease_epoch = 3,
               state = '{"s": [1, 2]}', next_params = '{"p": true}', result = '"r"',
               last_error = 'e', singleton_key = 's', recoveries = 1, parent_id = $2,
               stage = 'st', checkpoint = 'cp', progress = 0.5, message = 'm', attempts = 2,
               version = 'v7'
         WHERE instance_id = $1
        """,
        busy.instance_id,
        fresh.instance_id,
    )
    rows = await admin.fetch(getattr(queries, statement), *[None] * 8, 50, 0)
    assert len(rows) == 2

    records = [instance_from_row(row) for row in rows]

    assert records == [_by_init(row) for row in rows]
    assert records[0].status is Status.RUNNING
    if "SUMMARIES" not in statement:
        assert (records[0].state, records[0].next_params) == ({"s": [1, 2]}, {"p": True})
    else:
        assert (records[0].state, records[0].next_params) == ({}, None)
    payloads = (records[0].params, records[0].result)
    assert payloads == ((None, None) if statement.endswith("PAYLOADS") else ({"n": 2}, "r"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        records[0].message = "changed"  # type: ignore[misc]


def test_new_instance_records_share_no_mutable_state() -> None:
    now = datetime.now(UTC)
    new = new_instance(noop, EnqueueRequest(name="noop", params={"a": 1}))
    row = {"params": {"a": 1}, "created_at": now, "run_after": now}
    first, second = new_instance_record(new, row), new_instance_record(new, row)
    assert first == second
    first.state["x"] = 1  # a handler's state starts as this dict
    assert second.state == {}
    assert (first.status, first.next_params, first.updated_at) == (Status.PENDING, {"a": 1}, now)


@pytest.mark.parametrize("summaries", [False, True])
async def test_a_list_without_payloads_leaves_them_out_full_records_or_summaries(
    store: Store, admin: asyncpg.Connection, summaries: bool
) -> None:
    # payloads=False left them in unless summaries=True was passed too.
    engine = make_engine(store, noop)
    enqueued = await engine.enqueue("noop", params={"n": 1})
    await admin.execute(
        """UPDATE laneway.instances SET result = '"r"', state = '{"s": 1}',
                  wait = '{"signal": "go"}' WHERE instance_id = $1""",
        enqueued.instance_id,
    )
    [full] = await engine.list_instances(summaries=summaries)
    [bare] = await engine.list_instances(limit=100, summaries=summaries, payloads=False)
    assert (full.params, full.result, full.wait is not None) == ({"n": 1}, "r", True)
    assert bare == dataclasses.replace(full, params=None, result=None, wait=None)
    assert bare.state == ({} if summaries else {"s": 1})  # a full record keeps the rest
