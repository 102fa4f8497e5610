"""TcpProxy's modes on a real PostgreSQL: pass, blackhole (silent, no FIN), close (reset)."""

import asyncio

import asyncpg
import pytest

from tests.chaos.proxy import TcpProxy

LOST = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)


async def answers(conn: asyncpg.Connection, within: float = 0.5) -> bool:
    """True if the connection answers a query in time; False if the query hangs."""
    try:
        return await asyncio.wait_for(conn.fetchval("SELECT 1"), within) == 1
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
