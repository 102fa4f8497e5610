"""ListenBackend on a real PostgreSQL: LISTEN once, heartbeat, reconnect, gap markers, bounds.

The adversity tests put tests/chaos/proxy.py's TcpProxy between the listener and the server.
"""

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg
import pytest
from broadcaster import Event

from laneway.engine import Engine, WorkflowRegistry
from laneway.events.backend import LISTENER_APPLICATION_NAME, ListenBackend, is_gap
from laneway.model import NOTIFY_CHANNEL, Notification
from laneway.store import Store
from tests.chaos.proxy import TcpProxy
from tests.workflows import noop

# -- helpers ----------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def running_backend(
    url: str, *, heartbeat_seconds: float = 5.0, inbox_size: int = 100
) -> AsyncIterator[ListenBackend]:
    """A connected backend with its supervision task, as the hub runs it."""
    backend = ListenBackend(url, heartbeat_seconds=heartbeat_seconds, inbox_size=inbox_size)
    await backend.connect()
    runner = asyncio.create_task(backend.run(), name="test-listener")
    try:
        yield backend
    finally:
        runner.cancel()
        await asyncio.wait([runner])
        await backend.disconnect()


async def until(condition: Callable[[], bool | Awaitable[bool]], *, within: float = 10.0) -> None:
    """Poll `condition` until it holds; fail after `within` seconds."""
    async with asyncio.timeout(within):
        while True:
            holds = condition()
            if await holds if inspect.isawaitable(holds) else holds:
                return
            await asyncio.sleep(0.01)


async def next_event(backend: ListenBackend, *, within: float = 10.0) -> Event:
    async with asyncio.timeout(within):
        return await backend.next_published()


async def listener_pids(admin: asyncpg.Connection) -> list[int]:
    rows = await admin.fetch(
        "SELECT pid FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name = $1",
        LISTENER_APPLICATION_NAME,
    )
    return [row["pid"] for row in rows]


async def terminate_listener(admin: asyncpg.Connection) -> int:
    pids = await listener_pids(admin)
    assert len(pids) == 1
    await admin.execute("SELECT pg_terminate_backend($1)", pids[0])
    return pids[0]


# -- tests ------------------------------------------------------------------------------------


async def test_backend_yields_each_payload_when_a_writer_commits(
    store: Store, database_url: str
) -> None:
    engine = Engine(store, WorkflowRegistry([noop]))
    async with running_backend(database_url) as backend:
        assert backend.is_connected
        enqueued = await engine.enqueue("noop")
        event = await next_event(backend)
    assert event.channel == NOTIFY_CHANNEL
    assert not is_gap(event)
    [recorded] = await store.instance_events_after(enqueued.instance_id, 0, 10)
    assert Notification.from_payload(event.message).last_event_id == recorded.event_id


async def test_backend_refuses_publish_and_other_channels_when_asked(database_url: str) -> None:
    async with running_backend(database_url) as backend:
        await backend.subscribe(NOTIFY_CHANNEL)
        await backend.unsubscribe(NOTIFY_CHANNEL)
        with pytest.raises(TypeError, match="own transactions"):
            await backend.publish(NOTIFY_CHANNEL, "x")
        with pytest.raises(ValueError, match="listens on"):
            await backend.subscribe("another_channel")


async def test_backend_listens_on_one_dedicated_connection_when_connected(
    database_url: str, admin: asyncpg.Connection
) -> None:
    async with running_backend(database_url):
        [pid] = await listener_pids(admin)
        query = await admin.fetchval("SELECT query FROM pg_stat_activity WHERE pid = $1", pid)
    assert query.startswith("LISTEN")


async def test_backend_reconnects_and_signals_a_gap_when_its_connection_is_terminated(
    database_url: str, admin: asyncpg.Connection
) -> None:
    async with running_backend(database_url) as backend:
        old_pid = await terminate_listener(admin)
        assert is_gap(await next_event(backend))
        assert backend.is_connected
        assert backend.reconnect_count == 1
        assert await listener_pids(admin) != [old_pid]
        # LISTEN was re-issued on the new connection.
        await admin.execute("SELECT pg_notify($1, 'after reconnect')", NOTIFY_CHANNEL)
        event = await next_event(backend)
    assert event.message == "after reconnect"


async def test_backend_retries_until_the_server_accepts_when_reconnects_fail(
    database_url: str, admin: asyncpg.Connection
) -> None:
    proxy = TcpProxy(database_url)
    async with proxy.running() as url, running_backend(url) as backend:
        proxy.refuse()
        await terminate_listener(admin)
        await until(lambda: proxy.accepted >= 4)  # the first connection, then refused tries
        await until(lambda: not backend.is_connected)
        proxy.accept()
        assert is_gap(await next_event(backend))
        assert backend.is_connected
        assert backend.reconnect_count == 1


async def test_backend_replaces_a_half_open_connection_when_the_heartbeat_times_out(
    database_url: str,
) -> None:
    proxy = TcpProxy(database_url)
    async with proxy.running() as url, running_backend(url, heartbeat_seconds=0.2) as backend:
        proxy.blackhole()
        # Within a few heartbeat periods: wait 0.2 s, probe times out after 0.2 s, reconnect.
        assert is_gap(await next_event(backend, within=3.0))
        assert backend.is_connected
        assert backend.reconnect_count == 1


async def test_backend_drops_and_signals_a_gap_when_its_inbox_overflows(
    database_url: str, admin: asyncpg.Connection
) -> None:
    async with running_backend(database_url, inbox_size=5) as backend:
        await admin.execute(
            "SELECT pg_notify($1, n::text) FROM generate_series(1, 20) AS n", NOTIFY_CHANNEL
        )
        await until(lambda: backend.dropped_count == 15)
        received = [await next_event(backend) for _ in range(6)]
    assert [e.message for e in received[:5]] == ["1", "2", "3", "4", "5"]
    assert is_gap(received[5])
