"""E-01 (PR tier): the API process's LISTEN connection terminated twenty times while events
flow; every subscriber still receives every event of its filter once, in order.

The termination is noticed at once (asyncpg's termination listener), the backend reconnects
with backoff, and each stream re-reads the event table from its cursor after the gap, so no
NOTIFY lost in between costs an event.
"""

import asyncio
from typing import Any

import asyncpg

from tests.api.conftest import LiveServer, wait_until
from tests.api.test_websocket import (
    assert_every_hello_event_once_in_order,
    collect_hello_events,
    enqueue_hello,
)

TERMINATIONS = 20
SUBSCRIBERS = 5
INSTANCES = 40  # 3 events each


async def _terminate_listener(admin: asyncpg.Connection) -> int:
    killed: int = await admin.fetchval(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name LIKE 'laneway-listener-%' AND datname = current_database()"
    )
    return killed


async def test_e01_twenty_listener_terminations_lose_no_event(
    server: LiveServer, admin: asyncpg.Connection
) -> None:
    received: list[list[dict[str, Any]]] = [[] for _ in range(SUBSCRIBERS)]
    subscribers = [
        asyncio.create_task(collect_hello_events(server, events, INSTANCES * 3))
        for events in received
    ]
    await server.wait_for_subscribers(SUBSCRIBERS)

    async def listening() -> bool:
        listener: object = (await server.health())["listener"]
        return listener == "ok"

    killed = 0
    for round_ in range(TERMINATIONS):
        # Events written around every termination; each round waits for the listener to be
        # back first, so every termination hits a live one.
        for n in range(INSTANCES // TERMINATIONS):
            await enqueue_hello(server, f"e01-{round_}-{n}")
        await wait_until(listening, seconds=20)
        killed += await _terminate_listener(admin)
    async with asyncio.timeout(60):
        await asyncio.gather(*subscribers)
    assert killed == TERMINATIONS
    for events in received:
        await assert_every_hello_event_once_in_order(server, events, instances=INSTANCES)
