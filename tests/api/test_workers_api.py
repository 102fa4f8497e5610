"""The `workers` query over a real uvicorn server (issue #18, point 4): the serving process,
a worker process next to it, readers only."""

import asyncio
import dataclasses
import os
import socket
from typing import Any

from laneway.services import open_services
from tests.api.conftest import TOKEN, LiveServer, live_server, make_settings, wait_until

WORKERS = """{ workers { ownerID role host pid workflows running concurrency
  startedAt lastSeenAt } }"""


async def _workers(server: LiveServer, token: str | None = None) -> list[dict[str, Any]]:
    body = await server.graphql(WORKERS, token=token)
    assert "errors" not in body, body
    workers: list[dict[str, Any]] = body["data"]["workers"]
    return workers


async def test_workers_lists_the_serving_process_then_a_worker_until_it_stops(
    database_url: str,
) -> None:
    settings = make_settings(database_url, owner_id="api-1", worker_concurrency=12)
    async with live_server(settings) as server:

        async def registered() -> bool:
            return len(await _workers(server)) == 1  # the lifespan's engine, once it runs

        await wait_until(registered)
        serve = (await _workers(server))[0]
        assert serve["ownerID"] == "api-1"
        assert serve["role"] == "serve"
        assert serve["host"] == socket.gethostname()
        assert serve["pid"] == os.getpid()
        assert {"hello", "noop", "two_steps"} <= set(serve["workflows"])
        assert serve["workflows"] == sorted(serve["workflows"])
        assert (serve["running"], serve["concurrency"]) == (0, 12)
        assert 0 < serve["startedAt"] <= serve["lastSeenAt"]  # ms epoch
        assert serve["startedAt"] > 1.6e12

        worker_settings = dataclasses.replace(
            settings, owner_id="worker-1", workflow_modules=("tests.workflows",)
        )
        async with open_services(worker_settings, role="worker") as services:
            stopping = asyncio.Event()
            task = asyncio.create_task(services.engine.run(stopping))

            async def both() -> bool:
                return len(await _workers(server)) == 2

            await wait_until(both)
            by_owner = {w["ownerID"]: w for w in await _workers(server)}
            assert by_owner["worker-1"]["role"] == "worker"
            assert "noop" in by_owner["worker-1"]["workflows"]
            assert "hello" not in by_owner["worker-1"]["workflows"]  # app.examples not loaded
            assert by_owner["api-1"]["role"] == "serve"
            stopping.set()
            await task
        assert [w["ownerID"] for w in await _workers(server)] == ["api-1"]


async def test_workers_is_for_readers_only(database_url: str) -> None:
    settings = make_settings(database_url, api_tokens=(TOKEN,))
    async with live_server(settings) as server:
        anonymous = await server.graphql(WORKERS)
        assert anonymous["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
        assert anonymous["data"] is None

        async def registered() -> bool:
            return [w["role"] for w in await _workers(server, token=TOKEN)] == ["serve"]

        await wait_until(registered)
