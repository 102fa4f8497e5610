"""A page of instances leaves out what the API never shows: `workflowInstances` over real HTTP
reads summaries, without `state` or `next_params` (an instance's state may be 8 MiB), while
`workflowInstance` and Engine.get still read the whole record. And what the operation does not
show: a page reads `params`, `result` and the wait (up to 256 KiB each) only when the operation
selects params, result or checkpointInputSchema.
"""

import dataclasses
import json
from typing import Any
from uuid import UUID

import asyncpg
import pytest

from laneway.model import InstanceFilter, InstanceRecord
from laneway.services import Services
from laneway.store import Store
from tests.api.conftest import LiveServer, live_server, make_settings, running_services

ENQUEUE = 'mutation ($p: JSON) { enqueueWorkflow(name: "hello", params: $p) { instanceID } }'
PAGE = "query { workflowInstances(limit: 50) { instanceID status params } }"
ONE = "query ($id: ID!) { workflowInstance(instanceID: $id) { instanceID status params } }"

# Nested deeper than Python's json decoder recurses: jsonb stores it, json.loads raises
# RecursionError. A read that decodes such a column fails; one that leaves it out answers.
UNDECODABLE = "[" * 5000 + "]" * 5000
LARGE_STATE = {"blob": "x" * (7 * 1024 * 1024)}  # under the 8 MiB a state may take


async def _enqueue(server: LiveServer, params: dict[str, str]) -> str:
    body = await server.graphql(ENQUEUE, p=params)
    instance_id: str = body["data"]["enqueueWorkflow"]["instanceID"]
    return instance_id


async def _set(admin: asyncpg.Connection, column: str, value: str, instance_id: str) -> None:
    assert column in {"state", "next_params", "wait", "result"}  # a column name, never input
    await admin.execute(
        f"UPDATE laneway.instances SET {column} = $1::jsonb WHERE instance_id = $2",  # noqa: S608
        value,
        UUID(instance_id),
    )


def test_the_undecodable_value_is_one_json_cannot_decode() -> None:
    with pytest.raises(RecursionError):
        json.loads(UNDECODABLE)


async def test_instance_page_answers_without_decoding_state_or_next_params(
    database_url: str, admin: asyncpg.Connection
) -> None:
    async with live_server(make_settings(database_url, engine_enabled=False)) as server:
        undecodable_state = await _enqueue(server, {"name": "a"})
        undecodable_next = await _enqueue(server, {"name": "b"})
        large_state = await _enqueue(server, {"name": "c"})
        await _set(admin, "state", UNDECODABLE, undecodable_state)
        await _set(admin, "next_params", UNDECODABLE, undecodable_next)
        await _set(admin, "state", json.dumps(LARGE_STATE), large_state)
        assert await admin.fetchval("SELECT count(*) FROM laneway.instances") == 3

        page = await server.graphql(PAGE)

        assert page.get("errors") is None
        assert page["data"]["workflowInstances"] == [
            {"instanceID": large_state, "status": "pending", "params": {"name": "c"}},
            {"instanceID": undecodable_next, "status": "pending", "params": {"name": "b"}},
            {"instanceID": undecodable_state, "status": "pending", "params": {"name": "a"}},
        ]
        one = await server.graphql(ONE, id=large_state)
        assert one == {
            "data": {
                "workflowInstance": {
                    "instanceID": large_state,
                    "status": "pending",
                    "params": {"name": "c"},
                }
            }
        }


WAIT = {
    "kind": "checkpoint",
    "input_schema": {"type": "object"},
    "seconds": None,
    "expiry": None,
    "retry": {"action": "ask", "params": {"big": "x" * 10_000}},
}


async def test_summaries_leave_out_state_and_next_params_that_get_returns(
    database_url: str, admin: asyncpg.Connection
) -> None:
    settings = make_settings(database_url, engine_enabled=False)
    services: Services
    async with running_services(settings) as services:
        enqueued = await services.engine.enqueue("hello", params={"name": "d"})
        instance_id = str(enqueued.instance_id)
        await _set(admin, "state", json.dumps(LARGE_STATE), instance_id)
        await _set(admin, "next_params", json.dumps({"name": "next"}), instance_id)
        await _set(admin, "wait", json.dumps(WAIT), instance_id)

        [summary] = await services.engine.list_instances(summaries=True)
        [full] = await services.engine.list_instances()
        got = await services.engine.get(enqueued.instance_id)

    assert (summary.state, summary.next_params) == ({}, None)
    assert got is not None
    assert (got.state, got.next_params) == (LARGE_STATE, {"name": "next"})
    assert full == got  # the Python API lists full records by default
    assert got.wait == WAIT
    # A summary keeps what the API shows of a wait (its input schema), not the retry params.
    shown = {key: value for key, value in WAIT.items() if key != "retry"}
    assert summary == dataclasses.replace(got, state={}, next_params=None, wait=shown)


@pytest.fixture
def pages_read(monkeypatch: pytest.MonkeyPatch) -> list[list[InstanceRecord]]:
    """The records every list and page read of the store returns from now on."""
    read: list[list[InstanceRecord]] = []
    for method in ("list_instances", "page_instances"):
        original = getattr(Store, method)

        async def spying(self: Store, *args: Any, _original: Any = original, **kw: Any) -> Any:
            records: list[InstanceRecord] = await _original(self, *args, **kw)
            read.append(records)
            return records

        monkeypatch.setattr(Store, method, spying)
    return read


RESULT = {"answer": 42}
LIST = "{ workflowInstances { instanceID %s } }"
CONNECTION = "{ workflowInstancesConnection { edges { node { instanceID %s } } } }"
# What an operation selects of each instance, and whether the page reads the payloads then.
SHOWN = " fragment Shown on WorkflowInstanceStatus { result }"
SELECTIONS = {
    "status": False,
    "status waitingReason { code } events { type } failures { message }": False,
    "params": True,
    "result": True,
    "checkpointInputSchema": True,
    "...Shown": True,
    "... on WorkflowInstanceStatus { params }": True,
}


@pytest.mark.parametrize("selection", sorted(SELECTIONS))
@pytest.mark.parametrize("document", [LIST, CONNECTION])
async def test_a_page_reads_payloads_only_when_the_operation_selects_them(
    database_url: str,
    admin: asyncpg.Connection,
    pages_read: list[list[InstanceRecord]],
    document: str,
    selection: str,
) -> None:
    async with live_server(make_settings(database_url, engine_enabled=False)) as server:
        instance_id = await _enqueue(server, {"name": "e"})
        await _set(admin, "result", json.dumps(RESULT), instance_id)
        await _set(admin, "wait", json.dumps(WAIT), instance_id)
        body = await server.graphql(document % selection + (SHOWN if "Shown" in selection else ""))

    assert body.get("errors") is None
    [[record]] = pages_read
    shown = (record.params, record.result, record.wait is not None)
    if SELECTIONS[selection]:
        assert shown == ({"name": "e"}, RESULT, True)
    else:
        assert shown == (None, None, False)


async def test_each_alias_reads_what_it_selects(
    database_url: str, pages_read: list[list[InstanceRecord]]
) -> None:
    async with live_server(make_settings(database_url, engine_enabled=False)) as server:
        await _enqueue(server, {"name": "f"})
        body = await server.graphql(
            "{ bare: workflowInstances { instanceID } full: workflowInstances { params } }"
        )
    assert body["data"]["full"] == [{"params": {"name": "f"}}]
    assert sorted(str(records[0].params) for records in pages_read) == ["None", "{'name': 'f'}"]


async def test_the_store_reads_summaries_without_payloads_when_asked(
    database_url: str, admin: asyncpg.Connection
) -> None:
    settings = make_settings(database_url, engine_enabled=False)
    services: Services
    async with running_services(settings) as services:
        enqueued = await services.engine.enqueue("hello", params={"name": "g"})
        instance_id = str(enqueued.instance_id)
        await _set(admin, "result", json.dumps(RESULT), instance_id)
        await _set(admin, "wait", json.dumps(WAIT), instance_id)
        store, where = services.store, InstanceFilter()
        [listed] = await store.list_instances(where, limit=5, offset=0, summaries=True)
        [bare] = await store.list_instances(
            where, limit=5, offset=0, summaries=True, payloads=False
        )
        [paged] = await store.page_instances(where, limit=5)
        [bare_page] = await store.page_instances(where, limit=5, payloads=False)
        # The engine's lists default to payloads, as they always gave them.
        [engine_listed] = await services.engine.list_instances(summaries=True)
        engine_page = await services.engine.page_instances(payloads=False)

    assert (listed.params, listed.result) == ({"name": "g"}, RESULT)
    assert paged == listed == engine_listed
    assert bare == bare_page == engine_page.records[0]
    assert bare == dataclasses.replace(listed, params=None, result=None, wait=None)
