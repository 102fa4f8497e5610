"""pauseQueue and resumeQueue over GraphQL on a real uvicorn server: what they answer, the
waiting reason they flip, write permission, input checks, the limits every request passes, and
the log line that says who asked."""

import logging
from typing import Any

import asyncpg
import pytest
from graphql import get_operation_ast, parse

from laneway.api.graphql.result_size import MAX_COST, operation_cost
from laneway.api.graphql.schema import schema
from laneway.api.request_trace import REQUEST_ID_HEADER
from tests.api.conftest import TOKEN, LiveServer, live_server, make_settings, wait_until

FIELDS = """name concurrency ratePerMinute paused settingsSource
            counts { pending running paused waiting completed failed cancelled }"""
PAUSE = f"mutation ($name: String!) {{ pauseQueue(name: $name) {{ {FIELDS} }} }}"
RESUME = f"mutation ($name: String!) {{ resumeQueue(name: $name) {{ {FIELDS} }} }}"
ENQUEUE = 'mutation { enqueueWorkflow(name: "noop") { instanceID } }'
INSTANCE = """query ($id: ID!) {
  workflowInstance(instanceID: $id) { status waitingReason { code message } }
}"""
QUEUES = "{ queues { name paused } }"
WORKERS = "{ workers { ownerID } }"
NO_COUNTS = {
    "pending": 0,
    "running": 0,
    "paused": 0,
    "waiting": 0,
    "completed": 0,
    "failed": 0,
    "cancelled": 0,
}


def _code(body: dict[str, Any]) -> str | None:
    code: str | None = body["errors"][0]["extensions"]["code"]
    return code


async def _instance(server: LiveServer, instance_id: str) -> dict[str, Any]:
    body = await server.graphql(INSTANCE, token=TOKEN, id=instance_id)
    instance: dict[str, Any] = body["data"]["workflowInstance"]
    return instance


@pytest.fixture
async def secured(database_url: str) -> Any:
    """A server that needs TOKEN to write (reads are open), its engine running."""
    settings = make_settings(database_url, api_tokens=(TOKEN,), open_reads=True)
    async with live_server(settings) as server:
        yield server


async def test_a_pause_holds_new_instances_with_queue_paused_until_the_resume(
    secured: LiveServer,
) -> None:
    async def worker_live() -> bool:
        return bool((await secured.graphql(WORKERS))["data"]["workers"])

    await wait_until(worker_live)  # else the reason would be NO_WORKER
    paused = (await secured.graphql(PAUSE, token=TOKEN, name="noop"))["data"]["pauseQueue"]
    assert paused == {
        "name": "noop",
        "concurrency": 100,
        "ratePerMinute": None,
        "paused": True,
        "settingsSource": "default",
        "counts": NO_COUNTS,
    }
    again = await secured.graphql(PAUSE, token=TOKEN, name="noop")
    assert again["data"]["pauseQueue"] == paused  # idempotent

    instance_id = (await secured.graphql(ENQUEUE, token=TOKEN))["data"]["enqueueWorkflow"][
        "instanceID"
    ]
    held = await _instance(secured, instance_id)
    assert held == {
        "status": "pending",
        "waitingReason": {"code": "QUEUE_PAUSED", "message": "queue 'noop' is paused"},
    }
    listed = {q["name"]: q["paused"] for q in (await secured.graphql(QUEUES))["data"]["queues"]}
    assert listed["noop"] is True
    assert listed["hello"] is False

    resumed = (await secured.graphql(RESUME, token=TOKEN, name="noop"))["data"]["resumeQueue"]
    assert resumed["paused"] is False

    async def completed() -> bool:
        return bool((await _instance(secured, instance_id))["status"] == "completed")

    await wait_until(completed)
    assert (await _instance(secured, instance_id))["waitingReason"] is None
    again = await secured.graphql(RESUME, token=TOKEN, name="noop")
    assert again["data"]["resumeQueue"]["paused"] is False  # idempotent


async def test_pause_and_resume_need_write_permission(
    secured: LiveServer, admin: asyncpg.Connection
) -> None:
    for document in (PAUSE, RESUME):
        assert _code(await secured.graphql(document, name="noop")) == "UNAUTHENTICATED"
        assert _code(await secured.graphql(document, token="guess", name="noop")) == "FORBIDDEN"
    assert not await admin.fetchval("SELECT paused FROM laneway.queues WHERE name = 'noop'")
    assert not await admin.fetchval("SELECT count(*) FROM laneway.queues WHERE name = 'new'")
    allowed = await secured.graphql(PAUSE, token=TOKEN, name="new")  # a queue there is not yet
    assert allowed["data"]["pauseQueue"]["paused"] is True


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("", "queue name must be 1-64 letters, digits or _ . : -"),
        ("has space", "queue name must be 1-64 letters, digits or _ . : -"),
        ("x" * 65, 'argument "name" of pauseQueue must be at most 64 characters'),
        ("nul\x00", 'argument "name" of pauseQueue must not contain NUL'),
    ],
)
async def test_a_bad_name_is_bad_user_input_and_writes_nothing(
    secured: LiveServer, admin: asyncpg.Connection, name: str, says: str
) -> None:
    before = await admin.fetchval("SELECT count(*) FROM laneway.queues")
    body = await secured.graphql(PAUSE, token=TOKEN, name=name)
    assert _code(body) == "BAD_USER_INPUT"
    assert says in body["errors"][0]["message"]
    # null when the engine refused the name; left out when the argument guard did, before
    # anything ran (a request error).
    assert body.get("data") is None
    assert await admin.fetchval("SELECT count(*) FROM laneway.queues") == before
    resume = await secured.graphql(RESUME, token=TOKEN, name=name)
    assert _code(resume) == "BAD_USER_INPUT"


async def test_each_call_logs_the_queue_the_client_and_the_request_id(
    secured: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="laneway.engine.queue_calls")
    for document, message in ((PAUSE, "queue paused"), (RESUME, "queue resumed")):
        response = await secured.client.post(
            "/graphql",
            json={"query": document, "variables": {"name": "noop"}},
            headers={"authorization": f"Bearer {TOKEN}", REQUEST_ID_HEADER: f"op-{message[6:]}"},
        )
        assert response.status_code == 200
        assert "errors" not in response.json()
        [record] = [r for r in caplog.records if r.getMessage() == message]
        assert record.levelno == logging.INFO
        assert record.__dict__["queue"] == "noop"
        assert record.__dict__["requested_by"] == "graphql from 127.0.0.1"
        assert record.__dict__["request_id"] == response.headers[REQUEST_ID_HEADER]


async def test_the_rate_limit_and_result_size_take_them_as_any_mutation(
    database_url: str,
) -> None:
    # Production's limits (make_settings turns the rate limit off): one token each.
    settings = make_settings(
        database_url,
        api_tokens=(TOKEN,),
        rate_limit_per_second=0.1,
        rate_burst=2,
        engine_enabled=False,
    )
    async with live_server(settings) as server:
        assert (await server.graphql(PAUSE, token=TOKEN, name="noop"))["data"]["pauseQueue"]
        assert (await server.graphql(RESUME, token=TOKEN, name="noop"))["data"]["resumeQueue"]
        response = await server.client.post(
            "/graphql",
            json={"query": PAUSE, "variables": {"name": "noop"}},
            headers={"authorization": f"Bearer {TOKEN}"},
        )
        assert response.status_code == 429  # the burst of 2 is spent: a third waits
    for document in (PAUSE, RESUME):
        parsed = parse(document)
        operation = get_operation_ast(parsed)
        assert operation is not None
        assert operation_cost(schema._schema, parsed, operation, {}) <= MAX_COST // 100
