"""TcpProxy's modes on a real PostgreSQL: pass, blackhole (silent, no FIN), close (reset)."""

import asyncio
from collections.abc import Awaitable, Callable

import asyncpg
import pytest

from tests.chaos.proxy import TcpProxy

LOST = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)


async def answers(conn: asyncpg.Connection, within: float = 0.5) -> bool:
    """True if the connection answers a query in time; False if the query hangs."""
    try:
        answer: object = await asyncio.wait_for(conn.fetchval("SELECT 1"), within)
        return answer == 1
    except TimeoutError:
        return False


async def test_blackhole_hangs_open_and_new_links_and_healing_resets_them(
    database_url: str,
) -> None:
    proxy = TcpProxy(database_url)
    async with proxy.running() as url:
        before = await asyncpg.connect(url)
        assert await answers(before)
        proxy.set_mode("blackhole")
        assert not await answers(before)  # no error, no answer: half-open
        assert not before.is_closed()
        with pytest.raises(TimeoutError):
            await asyncpg.connect(url, timeout=0.5)  # the handshake is swallowed too
        proxy.set_mode("pass")
        with pytest.raises(LOST):
            await before.fetchval("SELECT 1")  # its swallowed stream was reset
        after = await asyncpg.connect(url)
        assert await answers(after)
        await after.close()
        before.terminate()


async def test_close_resets_open_links_and_refuses_new_ones(database_url: str) -> None:
    proxy = TcpProxy(database_url)
    async with proxy.running() as url:
        conn = await asyncpg.connect(url)
        proxy.set_mode("close")
        with pytest.raises(LOST):
            await conn.fetchval("SELECT 1")
        with pytest.raises(LOST):
            await asyncpg.connect(url, timeout=2)
        proxy.set_mode("pass")
        again = await asyncpg.connect(url)
        assert await answers(again)
        await again.close()
        conn.terminate()


async def test_a_link_still_connecting_upstream_when_the_blackhole_begins_is_swallowed(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by R-03: a worker reconnecting at the moment of a cut kept a working link through
    # the whole partition (set_mode marked only the links already registered).
    proxy = TcpProxy(database_url)
    upstream_reached = asyncio.Event()
    cut_made = asyncio.Event()

    def held(connect: Callable[..., Awaitable[object]]) -> Callable[..., Awaitable[object]]:
        """`connect`, but only once the cut is made (the proxy's upstream open)."""

        async def after_the_cut(*args: object, **kwargs: object) -> object:
            upstream_reached.set()
            await cut_made.wait()
            return await connect(*args, **kwargs)

        return after_the_cut

    monkeypatch.setattr(asyncio, "open_unix_connection", held(asyncio.open_unix_connection))
    monkeypatch.setattr(asyncio, "open_connection", held(asyncio.open_connection))
    async with proxy.running() as url:
        connecting = asyncio.create_task(asyncpg.connect(url, timeout=1))
        await upstream_reached.wait()  # accepted in pass mode, upstream not open yet
        proxy.set_mode("blackhole")
        cut_made.set()
        with pytest.raises(TimeoutError):
            await connecting  # its handshake is swallowed like any other link's
        proxy.set_mode("pass")
