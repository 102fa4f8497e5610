"""cancelWorkflows, retryWorkflows and resumeWorkflows over a real server: dry runs, the
filter's checks, and the same write permission as every mutation."""

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from starlette.requests import Request

from laneway.api.graphql.context import laneway_context
from laneway.api.graphql.errors import STOP_AT
from laneway.api.graphql.schema import schema
from laneway.api.http.asgi import Receive, Scope, Send
from laneway.api.http.deadline import OperationDeadline
from laneway.api.request_trace import Trace, traced
from laneway.engine import EnqueueRequest
from tests.api.conftest import (
    TOKEN,
    LiveServer,
    live_server,
    make_settings,
    running_services,
)

ENQUEUE = 'mutation { enqueueWorkflow(name: "noop") { instanceID } }'
BULK = """
mutation Bulk($filter: InstanceFilter!, $dryRun: Boolean) {
  cancelWorkflows(filter: $filter, dryRun: $dryRun) { matched changed sampleIDs }
}"""


@pytest.fixture
async def idle(database_url: str) -> AsyncIterator[LiveServer]:
    """A server whose engine does not run: instances stay as the test puts them."""
    async with live_server(make_settings(database_url, engine_enabled=False)) as server:
        yield server


@pytest.fixture
async def secured(database_url: str) -> AsyncIterator[LiveServer]:
    settings = make_settings(database_url, api_tokens=(TOKEN,), engine_enabled=False)
    async with live_server(settings) as server:
        yield server


async def _enqueue(server: LiveServer, n: int, token: str | None = None) -> list[str]:
    ids = []
    for _ in range(n):
        body = await server.graphql(ENQUEUE, token=token)
        ids.append(body["data"]["enqueueWorkflow"]["instanceID"])
    return ids


def _code(body: dict[str, Any]) -> str:
    code: str = body["errors"][0]["extensions"]["code"]
    return code


async def test_cancel_dry_run_then_real_run_then_a_repeat(
    idle: LiveServer, admin: asyncpg.Connection
) -> None:
    ids = await _enqueue(idle, 3)
    dry = await idle.graphql(BULK, filter={"name": "noop"}, dryRun=True)
    assert dry["data"]["cancelWorkflows"] == {
        "matched": 3,
        "changed": 0,
        "sampleIDs": list(reversed(ids)),
    }
    pending = "SELECT count(*) FROM laneway.instances WHERE status = 'pending'"
    assert await admin.fetchval(pending) == 3
    real = await idle.graphql(BULK, filter={"name": "noop", "statuses": ["pending"]})
    assert real["data"]["cancelWorkflows"]["changed"] == 3
    assert await admin.fetchval(pending) == 0
    again = await idle.graphql(BULK, filter={"name": "noop"})
    assert again["data"]["cancelWorkflows"] == {"matched": 0, "changed": 0, "sampleIDs": []}


async def test_retry_and_resume_apply_to_failed_and_paused_ones(
    idle: LiveServer, admin: asyncpg.Connection
) -> None:
    ids = await _enqueue(idle, 4)
    await admin.execute(
        "UPDATE laneway.instances SET status = 'failed', attempts = 1 WHERE instance_id = $1",
        ids[0],
    )
    await admin.execute(
        "UPDATE laneway.instances SET status = 'paused', checkpoint = 'review'"
        " WHERE instance_id = $1",
        ids[1],
    )
    body = await idle.graphql(
        """mutation {
          retryWorkflows(filter: {queue: "noop"}) { matched changed sampleIDs }
          resumeWorkflows(filter: {version: "1"}) { matched changed sampleIDs }
        }"""
    )
    assert body["data"]["retryWorkflows"] == {"matched": 1, "changed": 1, "sampleIDs": [ids[0]]}
    assert body["data"]["resumeWorkflows"] == {"matched": 1, "changed": 1, "sampleIDs": [ids[1]]}
    statuses = await admin.fetch("SELECT DISTINCT status FROM laneway.instances")
    assert [row["status"] for row in statuses] == ["pending"]
    # An outside audit: a requested retry's `retrying` event had a null attempt where an
    # automatic one's has the failed attempt's number; each event carries the instance's count.
    await admin.execute(
        "UPDATE laneway.instances SET status = 'failed', attempts = 3 WHERE instance_id = $1",
        ids[2],
    )
    single = await idle.graphql(
        "mutation ($id: ID!) { retryWorkflow(instanceID: $id) { status } }", id=ids[2]
    )
    assert single["data"]["retryWorkflow"]["status"] == "pending"
    events = "query ($id: ID!) { workflowInstance(instanceID: $id) { events { type attempt } } }"
    seen = {}
    for instance_id in ids[:3]:
        body = await idle.graphql(events, id=instance_id)
        seen[instance_id] = body["data"]["workflowInstance"]["events"]
    assert seen[ids[0]] == [
        {"type": "enqueued", "attempt": 0},
        {"type": "retrying", "attempt": 1},
    ]
    assert seen[ids[1]] == [
        {"type": "enqueued", "attempt": 0},
        {"type": "resumed", "attempt": 0},
    ]
    assert seen[ids[2]] == [
        {"type": "enqueued", "attempt": 0},
        {"type": "retrying", "attempt": 3},
    ]


async def test_the_created_window_is_in_milliseconds(
    idle: LiveServer, admin: asyncpg.Connection
) -> None:
    await _enqueue(idle, 2)
    created = await admin.fetchval(
        "SELECT extract(epoch FROM max(created_at)) * 1000 FROM laneway.instances"
    )
    after = await idle.graphql(BULK, filter={"createdAfter": float(created) + 1000}, dryRun=True)
    assert after["data"]["cancelWorkflows"]["matched"] == 0
    before = await idle.graphql(BULK, filter={"createdBefore": float(created) + 1000}, dryRun=True)
    assert before["data"]["cancelWorkflows"]["matched"] == 2


@pytest.mark.parametrize(
    ("where", "named"),
    [
        ({"statuses": ["done"]}, "each of filter.statuses must be one of"),
        ({"createdAfter": -1.0}, "createdAfter"),
        ({"createdBefore": 1e300}, "createdBefore"),
        ({"name": "n" * 65}, "name"),
    ],
)
async def test_a_bad_filter_is_bad_user_input_and_changes_nothing(
    idle: LiveServer, admin: asyncpg.Connection, where: dict[str, Any], named: str
) -> None:
    await _enqueue(idle, 1)
    body = await idle.graphql(BULK, filter=where)
    assert _code(body) == "BAD_USER_INPUT"
    assert named in body["errors"][0]["message"]  # the argument refused, by name
    assert await admin.fetchval("SELECT count(*) FROM laneway.instances WHERE status = 'pending'")


async def test_a_non_finite_time_literal_is_bad_user_input(idle: LiveServer) -> None:
    body = await idle.graphql(
        "mutation { cancelWorkflows(filter: {createdAfter: 1e999}) { matched } }"
    )
    assert _code(body) == "BAD_USER_INPUT"


async def test_bulk_mutations_need_write_permission(
    secured: LiveServer, admin: asyncpg.Connection
) -> None:
    await _enqueue(secured, 2, token=TOKEN)
    for field in ("cancelWorkflows", "retryWorkflows", "resumeWorkflows"):
        query = f"mutation {{ {field}(filter: {{}}) {{ matched changed }} }}"
        assert _code(await secured.graphql(query)) == "UNAUTHENTICATED"
        assert _code(await secured.graphql(query, token="guess")) == "FORBIDDEN"
    pending = "SELECT count(*) FROM laneway.instances WHERE status = 'pending'"
    assert await admin.fetchval(pending) == 2
    allowed = await secured.graphql(BULK, token=TOKEN, filter={})
    assert allowed["data"]["cancelWorkflows"]["changed"] == 2


async def test_a_bulk_action_stopped_before_its_deadline_is_timeout_with_its_counts(
    database_url: str,
) -> None:
    # The HTTP deadline's middleware puts the time to stop at in the request's scope (here:
    # already past); the action stops between batches and says how far it got.
    settings = make_settings(database_url, engine_enabled=False)
    async with running_services(settings) as services:
        await services.engine.enqueue_many([EnqueueRequest(name="noop") for _ in range(250)])
        request = Request({"type": "http", "headers": [], STOP_AT: 0.0})
        context = await laneway_context(services, request)
        with traced(Trace(request_id="bulk", completed=[])) as trace:
            result = await schema.execute(
                'mutation { cancelWorkflows(filter: {name: "noop"}) { matched changed } }',
                context_value=context,
            )
    # Its first batch committed: no answer to the request may say that nothing happened.
    assert trace.completed == ["cancelWorkflows"]
    assert not trace.nothing_done()
    assert result.data is None
    assert result.errors is not None
    [error] = result.errors
    assert error.extensions == {"code": "TIMEOUT", "matched": 250, "changed": 100}
    assert "changing 100 of the 250" in error.message


def test_the_deadline_puts_the_time_to_stop_at_in_the_scope() -> None:
    seen: list[float] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope[STOP_AT] - asyncio.get_running_loop().time())

    async def call(seconds: float) -> float:
        middleware = OperationDeadline(app, seconds=seconds)
        await middleware({"type": "http", "path": "/graphql"}, _nothing, _nothing)
        return seen[-1]

    assert 7.9 < asyncio.run(call(10.0)) <= 9.0  # a second before ten
    assert 1.5 < asyncio.run(call(2.0)) <= 1.6  # a fifth of two


async def _nothing(*args: Any) -> Any:
    return None
