"""enqueueWorkflows over a real server: results in request order, keys per request, the
limit of 1000, and a refused request refusing the whole call with nothing written."""

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from tests.api.conftest import TOKEN, LiveServer, live_server, make_settings, wait_until
from tests.api.test_input_guard import refusal

BATCH = """
mutation Batch($requests: [EnqueueInput!]!) {
  enqueueWorkflows(requests: $requests) {
    instanceID created instance { name queue priority status version params }
  }
}"""
# Without the instances' params: 1,000 of them, counted at their largest (256 KiB each), are
# far over the result-size cap.
IDS = """
mutation Batch($requests: [EnqueueInput!]!) {
  enqueueWorkflows(requests: $requests) { instanceID created instance { status } }
}"""
COUNT = "SELECT count(*) FROM laneway.instances"


@pytest.fixture
async def idle(database_url: str) -> AsyncIterator[LiveServer]:
    """A server whose engine does not run: instances stay as the test puts them."""
    async with live_server(make_settings(database_url, engine_enabled=False)) as server:
        yield server


async def test_results_come_in_request_order_with_keys_per_request(
    idle: LiveServer, admin: asyncpg.Connection
) -> None:
    first = await idle.graphql(
        'mutation { enqueueWorkflow(name: "noop", singletonKey: "only") { instanceID } }'
    )
    existing = first["data"]["enqueueWorkflow"]["instanceID"]
    requests = [
        {"name": "noop", "params": {"n": 1}, "priority": 5},
        {"name": "noop", "idempotencyKey": "twice", "queue": "elsewhere"},
        {"name": "noop", "singletonKey": "only"},  # names the instance that exists
        {"name": "noop", "idempotencyKey": "twice"},  # names the second request's
        {"name": "noop", "delayMs": 60000, "concurrencyKey": "tenant-a"},
    ]
    body = await idle.graphql(BATCH, requests=requests)
    results = body["data"]["enqueueWorkflows"]
    assert [r["created"] for r in results] == [True, True, False, False, True]
    assert results[0]["instance"]["params"] == {"n": 1}
    assert results[0]["instance"]["priority"] == 5
    assert results[1]["instance"]["queue"] == "elsewhere"
    assert results[2]["instanceID"] == existing
    assert results[3]["instanceID"] == results[1]["instanceID"]
    assert {r["instance"]["version"] for r in results} == {"1"}
    assert await admin.fetchval(COUNT) == 4  # the one before, and three new
    again = await idle.graphql(BATCH, requests=requests[1:4])
    assert [r["created"] for r in again["data"]["enqueueWorkflows"]] == [False, False, False]


async def test_a_null_field_takes_its_default_as_in_enqueue_workflow(
    idle: LiveServer, admin: asyncpg.Connection
) -> None:
    nulls = {
        "params": None,
        "queue": None,
        "priority": None,
        "delayMs": None,
        "idempotencyKey": None,
        "singletonKey": None,
        "concurrencyKey": None,
        "version": None,
    }
    body = await idle.graphql(BATCH, requests=[{"name": "noop", **nulls}, {"name": "noop"}])
    results = body["data"]["enqueueWorkflows"]
    assert [r["created"] for r in results] == [True, True]
    shown = [r["instance"] for r in results]
    assert shown[0] == shown[1]
    assert shown[0]["priority"] == 0
    assert shown[0]["version"] == "1"
    rows = await admin.fetch(
        "SELECT run_after <= now() AS due, idempotency_key, singleton_key, concurrency_key"
        " FROM laneway.instances"
    )
    assert [tuple(row) for row in rows] == [(True, None, None, None)] * 2


async def test_a_batch_of_1000_is_written_and_run(
    database_url: str, admin: asyncpg.Connection
) -> None:
    async with live_server(make_settings(database_url)) as server:
        requests = [{"name": "noop", "params": {"i": i}} for i in range(1000)]
        body = await server.graphql(IDS, requests=requests)
        results = body["data"]["enqueueWorkflows"]
        rows = await admin.fetch("SELECT instance_id, (params->>'i')::int FROM laneway.instances")
        written = {str(instance_id): i for instance_id, i in rows}
        assert [written[r["instanceID"]] for r in results] == list(range(1000))
        assert len({r["instanceID"] for r in results}) == 1000

        async def all_completed() -> bool:
            done = "SELECT count(*) FROM laneway.instances WHERE status = 'completed'"
            return bool(await admin.fetchval(done) == 1000)

        await wait_until(all_completed, seconds=60)


async def test_more_than_1000_requests_are_refused_and_nothing_is_written(
    idle: LiveServer, admin: asyncpg.Connection
) -> None:
    body = await idle.graphql(IDS, requests=[{"name": "noop"}] * 1001)
    assert "at most 1000 per call" in refusal(body)
    assert await admin.fetchval(COUNT) == 0
    assert (await idle.graphql(BATCH, requests=[]))["data"]["enqueueWorkflows"] == []


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        ({"name": "no_such_workflow"}, "requests[2]: unknown workflow 'no_such_workflow'"),
        ({"name": "noop", "version": "9"}, "requests[2]: workflow 'noop' has no version '9'"),
        ({"name": "noop", "queue": "not a name"}, "requests[2]: queue name must be"),
    ],
)
async def test_one_refused_request_refuses_the_call_naming_its_index(
    idle: LiveServer, admin: asyncpg.Connection, bad: dict[str, Any], expected: str
) -> None:
    requests = [{"name": "noop"}, {"name": "noop"}, bad, {"name": "noop"}]
    assert refusal(await idle.graphql(BATCH, requests=requests)).startswith(expected)
    assert await admin.fetchval(COUNT) == 0


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        (
            {"name": "noop", "idempotencyKey": "k" * 256},
            'argument "requests[1].idempotencyKey" of enqueueWorkflows',
        ),
        (
            {"name": "noop", "params": {"text": "a\x00b"}},
            'argument "requests[1].params" of enqueueWorkflows',
        ),
        (
            {"name": "noop", "priority": 2_000_000},
            'argument "requests[1].priority" of enqueueWorkflows',
        ),
        ({"name": "noop", "delayMs": -1}, 'argument "requests[1].delayMs" of enqueueWorkflows'),
    ],
)
async def test_the_input_guard_checks_every_request_before_any_resolver(
    idle: LiveServer, admin: asyncpg.Connection, bad: dict[str, Any], expected: str
) -> None:
    body = await idle.graphql(BATCH, requests=[{"name": "noop"}, bad])
    assert refusal(body).startswith(expected)
    assert await admin.fetchval(COUNT) == 0


async def test_the_batch_needs_write_access(database_url: str, admin: asyncpg.Connection) -> None:
    settings = make_settings(database_url, api_tokens=(TOKEN,), engine_enabled=False)
    async with live_server(settings) as server:
        body = await server.graphql(BATCH, requests=[{"name": "noop"}])
        assert body.get("data") is None
        assert body["errors"][0]["extensions"]["code"] in {"UNAUTHENTICATED", "FORBIDDEN"}
        assert await admin.fetchval(COUNT) == 0
        allowed = await server.graphql(BATCH, token=TOKEN, requests=[{"name": "noop"}])
        assert allowed["data"]["enqueueWorkflows"][0]["created"] is True


async def test_a_literal_batch_is_guarded_the_same(
    idle: LiveServer, admin: asyncpg.Connection
) -> None:
    literal = (
        'mutation { enqueueWorkflows(requests: [{name: "noop"}, {name: "noop", priority: 1},'
        ' {name: "noop", singletonKey: "%s"}]) { created } }' % ("s" * 256)
    )
    assert refusal(await idle.graphql(literal)).startswith(
        'argument "requests[2].singletonKey" of enqueueWorkflows must be at most 255 characters'
    )
    assert await admin.fetchval(COUNT) == 0


async def test_a_key_that_met_a_held_singleton_keeps_answering_with_the_holder(
    idle: LiveServer, admin: asyncpg.Connection
) -> None:
    # An outside audit: the key returned the holder but stayed free, so the same request sent
    # again once the holder ended created an instance under it.
    one = 'mutation { enqueueWorkflow(name: "noop", singletonKey: "s"%s) { instanceID created } }'
    holder = (await idle.graphql(one % ""))["data"]["enqueueWorkflow"]["instanceID"]
    keyed = (await idle.graphql(one % ', idempotencyKey: "order-42"'))["data"]["enqueueWorkflow"]
    assert keyed == {"instanceID": holder, "created": False}
    cancel = "mutation($id: ID!) { cancelWorkflow(instanceID: $id) { status } }"
    cancelled = await idle.graphql(cancel, id=holder)
    assert cancelled["data"]["cancelWorkflow"]["status"] == "cancelled"
    again = (await idle.graphql(one % ', idempotencyKey: "order-42"'))["data"]["enqueueWorkflow"]
    assert again == {"instanceID": holder, "created": False}
    request = {"name": "noop", "idempotencyKey": "order-42"}
    body = await idle.graphql(BATCH, requests=[request, {**request, "singletonKey": "s"}])
    assert [r["instanceID"] for r in body["data"]["enqueueWorkflows"]] == [holder, holder]
    assert await admin.fetchval(COUNT) == 1
