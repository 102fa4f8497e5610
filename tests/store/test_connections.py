"""Every connection carries its process's name and PostgreSQL-side timeouts.

PostgreSQL turns every timeout off by default, and one stuck transaction then holds locks and
vacuum's xmin horizon for as long as it likes; the name lets an operator find its process.
"""

import socket

import asyncpg
import pytest

from laneway.config import MAX_OWNER_ID_LENGTH, Settings
from laneway.engine.engine import default_owner_id
from laneway.services import open_services
from laneway.store import open_store
from laneway.store.pool import Timeouts
from tests.engine.helpers import eventually
from tests.workflows import noop


async def test_pooled_connections_carry_the_configured_timeouts(database_url: str) -> None:
    timeouts = Timeouts(statement_ms=1234, lock_ms=567, idle_in_transaction_ms=8900)
    async with (
        open_store(database_url, application_name="laneway-test-pool", timeouts=timeouts) as store,
        store.connection() as conn,
    ):
        shown = await conn.fetchrow(
            "SELECT current_setting('statement_timeout') AS statement,"
            "       current_setting('lock_timeout') AS lock,"
            "       current_setting('idle_in_transaction_session_timeout') AS idle,"
            "       current_setting('application_name') AS name"
        )
    assert shown is not None
    assert dict(shown) == {
        "statement": "1234ms",
        "lock": "567ms",
        "idle": "8900ms",
        "name": "laneway-test-pool",
    }


async def test_a_tiny_timeout_is_one_millisecond_when_a_process_opens_its_pool(
    database_url: str,
) -> None:
    # 0.0004 s used to round to 0 ms, which PostgreSQL takes as no timeout at all.
    settings = Settings(database_url=database_url, owner_id="t1", lock_timeout_seconds=0.0004)
    async with (
        open_services(settings, workflows=[noop]) as services,
        services.store.connection() as conn,
    ):
        lock_timeout = await conn.fetchval("SELECT current_setting('lock_timeout')")
    assert lock_timeout == "1ms"


@pytest.mark.parametrize(
    ("seconds", "milliseconds"),
    [(0.0, 0), (0.0001, 1), (0.0004, 1), (0.0015, 2), (2.0, 2000), (2_147_483.0, 2_147_483_000)],
)
def test_timeouts_in_seconds_are_whole_milliseconds_and_only_zero_turns_one_off(
    seconds: float, milliseconds: int
) -> None:
    timeouts = Timeouts.from_seconds(statement=seconds, lock=seconds, idle_in_transaction=seconds)
    assert timeouts == Timeouts(
        statement_ms=milliseconds, lock_ms=milliseconds, idle_in_transaction_ms=milliseconds
    )


async def test_a_process_names_its_connections_by_role_and_owner(
    database_url: str, admin: asyncpg.Connection
) -> None:
    async def names() -> set[str]:
        rows = await admin.fetch(
            "SELECT application_name FROM pg_stat_activity WHERE application_name LIKE '%-w7'"
        )
        return {row["application_name"] for row in rows}

    settings = Settings(database_url=database_url, owner_id="w7", lock_timeout_seconds=3)
    async with open_services(settings, workflows=[noop], role="worker") as services:
        async with services.store.connection() as conn:
            lock_timeout = await conn.fetchval("SELECT current_setting('lock_timeout')")
        enqueued = await services.engine.enqueue("noop")
        # Enqueueing and reading need no LISTEN: a producer is not woken by every event.
        before_running = await names()
        async with services.engine.running():
            # The running engine listens, so other processes' enqueues and cancels wake it.
            await services.engine.wait(enqueued.instance_id, timeout=10)
            while_running = await names()
    assert lock_timeout == "3s"
    assert before_running == {"laneway-worker-w7"}
    assert while_running == {"laneway-worker-w7", "laneway-listener-w7"}


async def test_the_longest_owner_id_is_named_whole_in_every_connection(
    database_url: str, admin: asyncpg.Connection
) -> None:
    owner_id = "o" * MAX_OWNER_ID_LENGTH
    settings = Settings.from_env({"DATABASE_URL": database_url, "LANEWAY_OWNER_ID": owner_id})
    async with open_services(settings, workflows=[noop]) as services, services.engine.running():
        rows = await eventually(
            lambda: admin.fetch(
                "SELECT DISTINCT application_name FROM pg_stat_activity"
                " WHERE application_name LIKE 'laneway-%-ooo%'"
            ),
            lambda found: len(found) == 2,
        )
    assert {row["application_name"] for row in rows} == {
        f"laneway-worker-{owner_id}",
        f"laneway-listener-{owner_id}",
    }


def test_a_generated_owner_id_fits_whatever_the_host_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "h" * 64)  # Linux's HOST_NAME_MAX
    generated = default_owner_id()
    assert len(generated) == MAX_OWNER_ID_LENGTH
    assert generated.startswith("hhh")
    assert Settings.from_env({"LANEWAY_OWNER_ID": generated}).owner_id == generated


async def test_an_engine_run_as_a_library_registers_as_a_worker(
    database_url: str, admin: asyncpg.Connection
) -> None:
    # Not the HTTP service (which says role="serve" in api/lifespan.py): a worker, in the
    # workers registry and in pg_stat_activity alike.
    settings = Settings(database_url=database_url, owner_id="lib1")
    async with open_services(settings, workflows=[noop]) as services, services.engine.running():
        workers = await eventually(services.engine.workers, bool)  # registered once it runs
        names = await admin.fetch(
            "SELECT DISTINCT application_name FROM pg_stat_activity"
            " WHERE application_name LIKE 'laneway-%-lib1'"
        )
    assert [(w.owner_id, w.role) for w in workers] == [("lib1", "worker")]
    assert {row["application_name"] for row in names} == {
        "laneway-worker-lib1",
        "laneway-listener-lib1",
    }
