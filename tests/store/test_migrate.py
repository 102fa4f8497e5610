"""Migrations: apply from empty, no-op the second time, safe when starters race."""

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from laneway.errors import DatabaseNewerError, MigrationsMissingError
from laneway.model import Status
from laneway.store import Store, open_store, queries
from laneway.store.databases import database_url_for
from laneway.store.migrate import Migration, apply_migrations, migrate, migrations, redact_url
from laneway.store.pool import connect
from tests.engine.helpers import make_engine
from tests.runtime_role import runtime_role
from tests.workflows import noop


@pytest.fixture
async def empty_database_url(server_url: str) -> AsyncIterator[str]:
    name = f"e_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        yield database_url_for(server_url, name)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def test_migrations_apply_once_when_run_twice(empty_database_url: str) -> None:
    conn = await connect(empty_database_url)
    try:
        first = await apply_migrations(conn)
        second = await apply_migrations(conn)
        recorded = await conn.fetch("SELECT name FROM laneway.schema_migrations ORDER BY name")
    finally:
        await conn.close()
    assert first == [m.name for m in migrations()]
    assert second == []
    assert [r["name"] for r in recorded] == first


async def test_migrations_are_safe_when_starters_race(empty_database_url: str) -> None:
    conns = [await connect(empty_database_url) for _ in range(5)]
    try:
        results = await asyncio.gather(*(apply_migrations(c) for c in conns))
        count = await conns[0].fetchval("SELECT count(*) FROM laneway.schema_migrations")
    finally:
        for c in conns:
            await c.close()
    applied = [name for result in results for name in result]
    assert sorted(applied) == [m.name for m in migrations()]  # each applied exactly once
    assert count == len(migrations())


async def test_owner_rule_mends_rows_that_broke_it_before(empty_database_url: str) -> None:
    # 0009 makes "an owner exactly while running" a constraint; rows from before that broke
    # the rule must not stop the migration (and the service's start with it).
    before = [m for m in migrations() if m.name < "0009"]
    conn = await connect(empty_database_url)
    try:
        await apply_migrations(conn, before)
        await conn.execute("INSERT INTO laneway.queues (name) VALUES ('q')")
        insert = (
            "INSERT INTO laneway.instances (instance_id, name, queue, status, owner_id)"
            " VALUES ($1, 'w', 'q', $2, $3)"
        )
        finished, orphan = uuid.uuid4(), uuid.uuid4()
        await conn.execute(insert, finished, "completed", "gone-worker")
        await conn.execute(insert, orphan, "running", None)
        await apply_migrations(conn)
        rows = {
            r["instance_id"]: r
            for r in await conn.fetch(
                "SELECT instance_id, status, owner_id, lease_expires_at <= now() AS due"
                " FROM laneway.instances"
            )
        }
    finally:
        await conn.close()
    assert rows[finished]["owner_id"] is None
    assert rows[orphan]["status"] == "running"
    assert rows[orphan]["owner_id"] is not None
    assert rows[orphan]["due"] is True  # the lease reaper recovers it at once


async def test_migrate_reports_what_it_applied_and_the_version(empty_database_url: str) -> None:
    first = await migrate(empty_database_url)
    second = await migrate(empty_database_url)
    names = [m.name for m in migrations()]
    assert first.applied == names
    assert second.applied == []
    assert first.version == second.version == names[-1]
    assert first.database == empty_database_url  # no password to hide here


FROM_A_NEWER_RELEASE = "9999_from_a_newer_release"


async def test_a_database_a_newer_laneway_migrated_is_refused_at_start_and_by_migrate(
    database_url: str, admin: asyncpg.Connection
) -> None:
    # A newer release's migration may replace functions this code calls: running on would
    # fail every write and burn every instance's attempts. Refused, naming what is unknown.
    await admin.execute(
        "INSERT INTO laneway.schema_migrations (name) VALUES ($1)", FROM_A_NEWER_RELEASE
    )
    with pytest.raises(DatabaseNewerError, match=FROM_A_NEWER_RELEASE) as refused:
        async with open_store(database_url):
            pytest.fail("the store opened on a database a newer Laneway migrated")
    assert refused.value.unknown == [FROM_A_NEWER_RELEASE]
    assert "run the newer release" in str(refused.value)
    with pytest.raises(DatabaseNewerError, match=FROM_A_NEWER_RELEASE):
        await migrate(database_url)


async def test_a_schema_check_names_every_migration_a_newer_release_applied_under_the_store(
    store: Store, admin: asyncpg.Connection
) -> None:
    # Found by an outside audit: a process left running after a newer release's migrate wrote
    # on with its old SQL. What a process without an engine reads to learn of it (one
    # statement); once it finds one, it names every migration it does not ship.
    assert await store.check_schema() is None
    waiting = asyncio.ensure_future(store.wait_newer_release())
    newer = ["9998_from_a_newer_release", FROM_A_NEWER_RELEASE]
    await admin.executemany(
        "INSERT INTO laneway.schema_migrations (name) VALUES ($1)", [(n,) for n in newer]
    )
    found = await store.check_schema()
    assert found is not None
    assert found.unknown == newer
    assert store.newer_release is found
    assert await asyncio.wait_for(waiting, timeout=5) is found
    assert await store.check_schema() is found  # set once


async def test_a_role_without_create_starts_when_nothing_is_pending_and_only_then(
    database_url: str, admin: asyncpg.Connection
) -> None:
    # CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even when the schema exists:
    # with nothing pending, a start runs no DDL at all.
    async with runtime_role(database_url) as role_url:
        async with open_store(role_url, pool_size=2) as store:
            engine = make_engine(store, noop)
            handle = await engine.enqueue("noop")
            assert await engine.tick() == 1
            done = await engine.get(handle.instance_id)
            assert done is not None
            assert done.status == Status.COMPLETED
        assert (await migrate(role_url)).applied == []
        # With one pending it cannot migrate, and must not run on the schema as it is.
        last = migrations()[-1].name
        await admin.execute("DELETE FROM laneway.schema_migrations WHERE name = $1", last)
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="permission denied"):
            async with open_store(role_url, pool_size=2):
                pytest.fail("the store opened with a migration pending")


def test_migrations_refuse_when_the_package_has_no_sql_files() -> None:
    with pytest.raises(MigrationsMissingError, match="no migration files found"):
        migrations("laneway.engine")
    with pytest.raises(MigrationsMissingError):
        migrations("laneway.no_such_package")


def test_shipped_migrations_are_numbered_without_gaps() -> None:
    numbers = [int(m.name[:4]) for m in migrations()]
    assert numbers == list(range(1, len(numbers) + 1))


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:secret@db:5432/x", "postgresql://u:***@db:5432/x"),
        ("postgresql://u@db/x", "postgresql://u@db/x"),
        ("postgresql://u:p@[::1]/x?sslmode=require", "postgresql://u:***@[::1]/x?sslmode=require"),
        # libpq's parameters in the query: password, and the client key's sslpassword.
        ("postgresql://u@db/x?password=secret", "postgresql://u@db/x?password=***"),
        (
            "postgresql://u@db/x?sslmode=require&sslpassword=k&PASSWORD=s",
            "postgresql://u@db/x?sslmode=require&sslpassword=***&PASSWORD=***",
        ),
        ("postgresql://u:p@db/x?password=q", "postgresql://u:***@db/x?password=***"),
    ],
)
def test_redact_url_hides_only_the_password(url: str, shown: str) -> None:
    assert redact_url(url) == shown


QUERY_NAMES = [
    name
    for name, value in vars(queries).items()
    if name.isupper()
    and not name.startswith("_")  # fragments that statements are built from
    and isinstance(value, str)
    and name not in {"CREATE_MIGRATIONS_TABLE", "INSTANCE_COLUMNS"}
]


@pytest.mark.parametrize("name", QUERY_NAMES)
async def test_query_prepares_on_migrated_schema(admin: asyncpg.Connection, name: str) -> None:
    await admin.prepare(getattr(queries, name))


@pytest.mark.parametrize("function", ["laneway.claim", "laneway.write_runner_batch"])
async def test_hot_path_function_plans_its_statements_once(
    admin: asyncpg.Connection, function: str
) -> None:
    # Re-planning with each call's values was most of a claim's time, and about half of a
    # group commit's; JIT-compiling a generic plan of a large backlog cost ~50 ms (migrations
    # 0008 and 0010). A later CREATE OR REPLACE drops these settings unless it says them again.
    # The claim also plans without bitmap and sequential scans (0015): a generic plan's guesses
    # for a small queue_keys table chose to sort every key instead of walking the index.
    config = await admin.fetchval("SELECT proconfig FROM pg_proc WHERE oid = $1::regproc", function)
    assert config[:2] == ["plan_cache_mode=force_generic_plan", "jit=off"]
    if function == "laneway.claim":
        assert config[2:] == ["enable_bitmapscan=off", "enable_seqscan=off"]
    else:
        assert config[2:] == []


async def test_migrating_under_live_engines_of_an_older_release_warns(
    store: Store, admin: asyncpg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    """Live engines while migrations are pending are of an older release (serve and worker
    migrate as they start): the docs say to stop them first, and they stop at their next
    heartbeat once the schema is newer. The one who migrates is told, not only them."""
    newer = [*migrations(), Migration(name="9999_next_release", sql="SELECT 1")]
    await store.heartbeat_worker(
        owner_id="old-worker", role="worker", host="h", pid=1, workflows=["noop"],
        versions=[], running=2, concurrency=10, heartbeat_seconds=5.0,
    )  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="laneway.store.migrate"):
        assert await apply_migrations(admin, newer) == ["9999_next_release"]
    (warned,) = [r for r in caplog.records if r.name == "laneway.store.migrate"]
    assert warned.getMessage() == "migrating while engines of an older release are live"
    assert warned.__dict__["engines"] == 1
    assert warned.__dict__["migrations"] == ["9999_next_release"]

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="laneway.store.migrate"):
        assert await apply_migrations(admin, newer) == []  # nothing pending: nothing said
        await store.remove_worker("old-worker")
        again = [*newer, Migration(name="9999_next_release_2", sql="SELECT 1")]
        assert await apply_migrations(admin, again) == ["9999_next_release_2"]
    assert [r for r in caplog.records if r.name == "laneway.store.migrate"] == []
