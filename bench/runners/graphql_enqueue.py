"""The enqueue-graphql phase of laneway_runner.py: `enqueueWorkflows` of 1000 over HTTP.

The real service stack (create_app and server_config under uvicorn, as `laneway serve` runs
it) serves in this process on a free loopback port, API only (engine off, rate limits off:
one client on loopback would measure the limiter). One httpx keep-alive connection posts
--count requests as consecutive mutations of at most 1000; the bodies are encoded and the
connection opened before the clock starts, so the clock holds what the service does (HTTP,
GraphQL, validation, the batch write) plus reading each answer. Every answer is checked: status
200, no `errors`, one result per request.

Answers {"seconds"}, or {"missing": why} when the service has no `enqueueWorkflows` yet.
"""

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator

import common
import httpx
import uvicorn

from laneway import Settings, Workflow
from laneway.api.app import create_app, server_config

MUTATION = (
    "mutation($requests: [EnqueueInput!]!) { enqueueWorkflows(requests: $requests) { instanceID } }"
)
START_SECONDS = 60.0


@contextlib.asynccontextmanager
async def serving(settings: Settings, workflow: Workflow) -> AsyncIterator[int]:
    """The service on 127.0.0.1 for the block; its port."""
    app = create_app(settings, workflows=[workflow])
    server = uvicorn.Server(server_config(app, host="127.0.0.1", port=0, settings=settings))
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(START_SECONDS):
            while not server.started:
                if task.done():
                    task.result()  # its error
                    raise RuntimeError("the server stopped before it started")
                await asyncio.sleep(0.02)
        port: int = server.servers[0].sockets[0].getsockname()[1]
        yield port
    finally:
        server.should_exit = True
        async with asyncio.timeout(30):
            await task


def bodies(name: str, count: int) -> list[tuple[int, bytes]]:
    """Each mutation's request count and encoded JSON body."""
    out = []
    for offset in range(0, count, common.BATCH_SIZE):
        ids = range(offset, min(offset + common.BATCH_SIZE, count))
        requests = [{"name": name, "params": {"i": i}} for i in ids]
        body = {"query": MUTATION, "variables": {"requests": requests}}
        out.append((len(requests), json.dumps(body).encode()))
    return out


def missing(answer: dict[str, object]) -> str | None:
    """Why the schema has no enqueueWorkflows, when that is what `answer`'s errors say."""
    errors = answer.get("errors")
    if not isinstance(errors, list):
        return None
    for error in errors:
        message = str(error.get("message", "")) if isinstance(error, dict) else str(error)
        if "enqueueWorkflows" in message or "EnqueueInput" in message:
            return message[:200]
    return None


def results_of(response: httpx.Response, expected: int) -> None:
    """Check one mutation's answer.

    Raises:
        RuntimeError: not 200, errors, or not one result per request.
    """
    answer = response.json()
    data = answer.get("data") if isinstance(answer, dict) else None
    results = data.get("enqueueWorkflows") if isinstance(data, dict) else None
    if response.status_code != 200 or answer.get("errors") or not isinstance(results, list):
        raise RuntimeError(f"enqueueWorkflows failed: {response.status_code} {response.text[:300]}")
    if len(results) != expected:
        raise RuntimeError(f"enqueueWorkflows answered {len(results)} results for {expected}")


async def phase(database_url: str, workflow: Workflow, count: int) -> dict[str, object]:
    settings = Settings(
        database_url=database_url,
        engine_enabled=False,
        rate_limit_per_second=0.0,
        ws_handshakes_per_minute=0,
        ws_connections_per_token=0,
        max_connections=0,
        graphiql=False,
    )
    prepared = bodies(workflow.name, count)
    headers = {"Content-Type": "application/json"}
    async with (
        serving(settings, workflow) as port,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client,
    ):
        (await client.get("/healthz")).raise_for_status()  # the connection, before the clock
        started = time.perf_counter()
        for index, (size, body) in enumerate(prepared):
            response = await client.post("/graphql", content=body, headers=headers)
            if index == 0 and (why := missing(response.json())) is not None:
                return {"missing": why}
            results_of(response, size)
        seconds = time.perf_counter() - started
    return {"seconds": seconds}
