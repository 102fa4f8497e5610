"""ConnectionPool on a real PostgreSQL: reuse, bounds, waiters, broken connections, close."""

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from laneway.store.pool import ConnectionPool, create_pool
from tests.events.test_backend import until


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[ConnectionPool]:
    """A pool of two connections, closed after the test."""
    opened = await create_pool(database_url, size=2)
    try:
        yield opened
    finally:
        await opened.close()


async def backend_pid(pool: ConnectionPool) -> int:
    async with pool.acquire(timeout=5) as conn:
        pid: int = await conn.fetchval("SELECT pg_backend_pid()")
    return pid


async def test_one_caller_at_a_time_reuses_one_connection(pool: ConnectionPool) -> None:
    pids = {await backend_pid(pool) for _ in range(20)}
    assert len(pids) == 1
    assert (pool.size, pool.idle) == (1, 1)


async def test_a_waiter_gets_the_first_connection_given_back_and_a_late_one_times_out(
    pool: ConnectionPool,
) -> None:
    first, second = pool.acquire(), pool.acquire()
    held = [await first.__aenter__(), await second.__aenter__()]
    assert pool.size == 2
    with pytest.raises(TimeoutError):
        async with pool.acquire(timeout=0.2):
            pass
    waiting = asyncio.create_task(backend_pid(pool))
    await asyncio.sleep(0)  # the waiter queues
    assert not waiting.done()
    given_back = await held[0].fetchval("SELECT pg_backend_pid()")
    await first.__aexit__(None, None, None)
    assert await asyncio.wait_for(waiting, 5) == given_back
    await second.__aexit__(None, None, None)
    assert (pool.size, pool.idle) == (2, 2)


async def test_a_connection_terminated_while_idle_is_replaced(
    pool: ConnectionPool, admin: asyncpg.Connection
) -> None:
    async with pool.acquire() as conn:
        old = await conn.fetchval("SELECT pg_backend_pid()")
    await admin.execute("SELECT pg_terminate_backend($1)", old)
    await until(conn.is_closed)  # the client reads the server's goodbye
    assert await backend_pid(pool) != old
    assert pool.size == 1


async def test_a_server_error_keeps_the_connection_and_a_cancelled_statement_is_stopped(
    pool: ConnectionPool, admin: asyncpg.Connection
) -> None:
    pid = await backend_pid(pool)
    with pytest.raises(asyncpg.DivisionByZeroError):
        async with pool.acquire() as conn:
            await conn.fetchval("SELECT 1 / 0")
    assert await backend_pid(pool) == pid  # the exchange was complete: lent again
    with pytest.raises(TimeoutError):
        async with pool.acquire() as conn, asyncio.timeout(0.2):
            await conn.execute("SELECT pg_sleep(30)")
    # The server stops the statement (asyncpg's cancel request is let through) instead of
    # sleeping on for 30 s, and the connection is lent again once it is at rest.
    await until(lambda: not_sleeping(admin, pid), within=5)
    await until(lambda: pool.idle == pool.size)
    assert pid in {await backend_pid(pool) for _ in range(3)}
    assert pool.size <= 2


async def not_sleeping(admin: asyncpg.Connection, pid: int) -> bool:
    query = await admin.fetchval(
        "SELECT query FROM pg_stat_activity WHERE pid = $1 AND state = 'active'", pid
    )
    return query is None or "pg_sleep" not in query


async def test_a_session_refused_as_read_only_is_closed_so_the_next_one_can_write(
    database_url: str, admin: asyncpg.Connection
) -> None:
    """Found by an outside audit: after a while of default_transaction_read_only (or a
    failover that landed on a standby), the sessions opened meanwhile stayed read-only for
    good, and every write of the process failed until it was restarted."""
    database = await admin.fetchval("SELECT current_database()")
    await admin.execute(f'ALTER DATABASE "{database}" SET default_transaction_read_only = on')
    pool = await create_pool(database_url, size=1)  # its session begins read-only
    try:
        with pytest.raises(asyncpg.ReadOnlySQLTransactionError):
            async with pool.acquire() as conn:
                await conn.execute("CREATE TABLE written (x int)")
        await admin.execute(f'ALTER DATABASE "{database}" RESET default_transaction_read_only')
        async with pool.acquire() as conn:
            await conn.execute("CREATE TABLE written (x int)")
        assert pool.size == 1
    finally:
        await pool.close()


async def test_a_transaction_left_open_is_not_lent_again(pool: ConnectionPool) -> None:
    async with pool.acquire() as conn:
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        await conn.execute("BEGIN")
    async with pool.acquire() as conn:
        assert not conn.is_in_transaction()
        assert await conn.fetchval("SELECT pg_backend_pid()") != pid


async def test_close_fails_waiters_waits_for_lent_connections_and_refuses_new_loans(
    database_url: str, admin: asyncpg.Connection
) -> None:
    pool = await create_pool(database_url, size=1, application_name="laneway-test-close")
    lent = pool.acquire()
    conn = await lent.__aenter__()
    waiting = asyncio.create_task(backend_pid(pool))
    await asyncio.sleep(0)
    closing = asyncio.create_task(pool.close(timeout=5))
    with pytest.raises(asyncpg.InterfaceError):
        await waiting
    assert not closing.done()  # the lent connection's block has not ended
    assert await conn.fetchval("SELECT 1") == 1  # and it still works meanwhile
    await lent.__aexit__(None, None, None)
    await asyncio.wait_for(closing, 5)
    assert conn.is_closed()
    with pytest.raises(asyncpg.InterfaceError):
        await backend_pid(pool)
    left = await admin.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'laneway-test-close'"
    )
    assert left in (0, 1)  # terminated; the server may not have reaped it yet


async def test_close_terminates_a_connection_whose_block_never_ends(database_url: str) -> None:
    pool = await create_pool(database_url, size=1)
    lent = pool.acquire()
    conn = await lent.__aenter__()
    await pool.close(timeout=0.1)
    assert conn.is_closed()
    await lent.__aexit__(None, None, None)  # a late end of the block is harmless
    assert pool.size == 0


async def test_many_concurrent_callers_never_exceed_the_size(database_url: str) -> None:
    pool = await create_pool(database_url, size=3)
    in_use = peak = 0

    async def one() -> None:
        nonlocal in_use, peak
        async with pool.acquire(timeout=10) as conn:
            in_use += 1
            peak = max(peak, in_use)
            await conn.execute("SELECT pg_sleep(0.005)")
            in_use -= 1

    try:
        await asyncio.gather(*(one() for _ in range(60)))
        assert peak == 3
        assert pool.size == 3
    finally:
        await pool.close()


async def test_connections_idle_past_the_limit_are_closed_keeping_one(
    database_url: str, admin: asyncpg.Connection
) -> None:
    pool = await create_pool(database_url, size=3, max_idle_seconds=0.3)
    try:
        loans = [pool.acquire() for _ in range(3)]
        held = [await loan.__aenter__() for loan in loans]
        pids = [await conn.fetchval("SELECT pg_backend_pid()") for conn in held]
        for loan in loans:
            await loan.__aexit__(None, None, None)
        assert (pool.size, pool.idle) == (3, 3)
        # The last one given back is on top of the stack: the one kept.
        await until(lambda: pool.size == 1)
        assert pool.idle == 1
        assert await backend_pid(pool) == pids[-1]

        async def only_the_kept_one_on_the_server() -> bool:
            rows = await admin.fetch(
                "SELECT pid FROM pg_stat_activity WHERE pid = any($1::int[])", pids
            )
            return {row["pid"] for row in rows} == {pids[-1]}

        await until(only_the_kept_one_on_the_server, within=5)  # the closed ones end there too
    finally:
        await pool.close()


async def test_after_expiry_new_demand_opens_connections_again(database_url: str) -> None:
    pool = await create_pool(database_url, size=2, max_idle_seconds=0.2)
    try:
        for _ in range(2):
            loans = [pool.acquire(), pool.acquire()]
            first, second = [await loan.__aenter__() for loan in loans]
            assert first is not second
            assert pool.size == 2
            for loan in loans:
                await loan.__aexit__(None, None, None)
            await until(lambda: pool.size == 1)
    finally:
        await pool.close()
    assert pool.size == 0


async def test_a_block_cancelled_as_its_transaction_began_leaves_a_usable_connection(
    pool: ConnectionPool,
) -> None:
    # A cancel whose request reaches the server while it runs a block's BEGIN stops the BEGIN
    # there; asyncpg keeps its failed transaction as the connection's top one. Lent as it was,
    # the next `conn.transaction()` took itself for a nested one and sent SAVEPOINT outside any
    # transaction (a batch enqueue's test met it under load). The same state, made at will:
    with pytest.raises(asyncio.CancelledError):
        await _cancelled_with_a_stale_transaction(pool)
    await until(lambda: pool.idle == pool.size)
    for _ in range(pool.size):  # whichever connection is lent
        async with pool.acquire() as conn, conn.transaction():
            assert await conn.fetchval("SELECT 1") == 1


async def _cancelled_with_a_stale_transaction(pool: ConnectionPool) -> None:
    async with pool.acquire() as conn:
        await conn.transaction().start()
        await conn.execute("ROLLBACK")  # the server's side, as the stopped BEGIN left it
        raise asyncio.CancelledError


async def test_a_cancelled_block_leaves_no_session_lock_behind(
    pool: ConnectionPool, admin: asyncpg.Connection
) -> None:
    pid = await backend_pid(pool)
    with pytest.raises(TimeoutError):
        async with pool.acquire() as conn, asyncio.timeout(0.2):
            await conn.execute("SELECT pg_advisory_lock(7461); SELECT pg_sleep(30)")
    await until(lambda: pool.idle == pool.size)
    assert pid in {await backend_pid(pool) for _ in range(3)}  # lent again, and
    held = await admin.fetchval(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 7461"
    )
    assert held == 0  # its session's lock went with the block
