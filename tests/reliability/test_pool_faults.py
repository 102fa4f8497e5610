"""P-07 (docs/reliability.md): cancelled statements and a frozen backend do not break the
pool: it stays within its size, keeps serving, and close() returns in bounded time. asyncpg
has lost connections to a cancelled acquire and waited forever in close() on a pending
cancel to a frozen server; these are the cases that must not come back through our pool.

PR tier: 200 cancelled loans; LANEWAY_CHAOS_FULL=1: the plan's 1,000. The backend freeze is
a few seconds here instead of the plan's 30 s: close() has to return after its own timeout
whatever the freeze's length.
"""

import asyncio
import os
import random
import signal
import time

import asyncpg
import pytest

from laneway.store.pool import ConnectionPool, connect, create_pool
from tests.events.test_backend import until
from tests.sizes import size

APPLICATION_NAME = "laneway-test-p07"


async def pool_connections(admin: asyncpg.Connection) -> int:
    count: int = await admin.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", APPLICATION_NAME
    )
    return count


async def within_the_pool(admin: asyncpg.Connection, pool: ConnectionPool) -> bool:
    return await pool_connections(admin) <= pool.size


async def warm(pool: ConnectionPool, count: int) -> None:
    """Open `count` connections now (a pool opens them as loans need them)."""
    entered = asyncio.Event()
    holders = 0

    async def hold() -> None:
        nonlocal holders
        async with pool.acquire(timeout=10):
            holders += 1
            if holders == count:
                entered.set()
            await entered.wait()

    await asyncio.gather(*(hold() for _ in range(count)))
    assert pool.size == count


async def test_cancelled_statements_leave_the_pool_within_its_size_and_serving(
    database_url: str, admin: asyncpg.Connection
) -> None:
    pool = await create_pool(database_url, size=10, application_name=APPLICATION_NAME)
    chance = random.Random(7)
    outcomes: list[BaseException | None] = []

    in_statement = 0

    async def one() -> None:
        nonlocal in_statement
        async with pool.acquire(timeout=30) as conn:
            in_statement += 1
            await conn.execute("SELECT pg_sleep(0.2)")

    async def cancelled_after(delay: float) -> None:
        task = asyncio.create_task(one())
        await asyncio.sleep(delay)  # the injected fault: cancel while queued or mid-statement
        task.cancel()
        try:
            await task
            outcomes.append(None)
        except BaseException as error:  # every outcome is classified below
            outcomes.append(error)

    try:
        await warm(pool, 10)
        count = size(200, 1000)
        await asyncio.gather(*(cancelled_after(chance.uniform(0, 0.05)) for _ in range(count)))
        kinds = {type(error).__name__ for error in outcomes if error is not None}
        assert kinds <= {"CancelledError"}  # no InternalClientError, no InterfaceError
        # Both faults happened: cancelled mid-statement, and cancelled while waiting.
        assert 10 <= in_statement < count
        assert pool.size <= 10
        # Terminated connections leave the server as it notices; never more than the size.
        await until(lambda: within_the_pool(admin, pool), within=5)
        async with pool.acquire(timeout=5) as conn:
            assert await conn.fetchval("SELECT 1") == 1
        assert pool.size <= 10
    finally:
        await pool.close()


async def test_close_returns_within_its_timeout_when_a_backend_is_frozen_mid_statement(
    database_url: str, admin: asyncpg.Connection
) -> None:
    async def open_one() -> asyncpg.Connection:
        # The plan's "command_timeout=5", shorter: the statement must give up first.
        return await connect(database_url, application_name=APPLICATION_NAME, command_timeout=1)

    pool = ConnectionPool(open_one, size=2)
    loan = pool.acquire(timeout=5)
    conn = await loan.__aenter__()
    pid: int = await conn.fetchval("SELECT pg_backend_pid()")
    try:
        os.kill(pid, signal.SIGSTOP)
    except PermissionError:
        await loan.__aexit__(None, None, None)
        await pool.close()
        pytest.skip("the database server's processes belong to another user")
    try:
        with pytest.raises(TimeoutError):
            await conn.execute("SELECT 1")  # the backend cannot answer
        started = time.monotonic()
        await pool.close(timeout=1.0)
        assert time.monotonic() - started < 2.0  # close timeout + 1 s
        assert conn.is_closed()
    finally:
        os.kill(pid, signal.SIGCONT)
        await loan.__aexit__(TimeoutError, None, None)
    assert pool.size == 0
