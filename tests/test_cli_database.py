"""`laneway` against a database it must not run on as it stands: one line, and nothing runs.

A database a newer release migrated, one an older release migrated (which only serve,
worker and migrate bring up to date), and (with a role that only runs Laneway) what such a
role may and may not do. The databases it cannot reach at all are in test_cli.py.
"""

import asyncio
import json
import shutil
import signal
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from uuid import UUID

import asyncpg
import pytest

from laneway.model import Status
from laneway.store import Store, queries
from laneway.store.databases import create_database, drop_database
from laneway.store.migrate import apply_migrations, migrations, redact_url
from laneway.store.pool import connect
from tests.runtime_role import runtime_role
from tests.test_cli import ROOT, environment, laneway

UNKNOWN_ID = "00000000-0000-7000-8000-000000000000"
EVERY_START = (("migrate",), ("status", UNKNOWN_ID), ("worker",), ("serve", "--port", "0"))
PROCESS_STARTS = tuple(command for command in EVERY_START if command[0] != "status")
# Every command that reads or acts on instances without --url: none of them migrates.
INSTANCE_COMMANDS = (
    ("status", UNKNOWN_ID),
    ("workflows",),
    ("queues",),
    ("preflight", "--workflows", "app.examples"),
    ("enqueue", "hello", "--params", '{"name": "New"}'),
    ("cancel", UNKNOWN_ID),
    ("retry", "--filter", "name=hello", "--yes"),
    ("signal", UNKNOWN_ID, "go"),
    ("watch", "--instance", UNKNOWN_ID),
)


async def says_in_one_line(
    env: dict[str, str],
    says: str,
    commands: tuple[tuple[str, ...], ...] = EVERY_START,
    exit_code: int = 1,
) -> list[str]:
    """Run `commands` (every kind of start); each must exit `exit_code` with its one line
    (serve logs its start and stop around it, no traceback). Returns the lines."""
    lines = []
    for command in commands:
        code, _, err = await laneway(*command, env=env)
        assert code == exit_code, (command, err)
        assert "Traceback" not in err, (command, err)
        if command[0] != "serve":
            assert len(err.strip().splitlines()) == 1, (command, err)
        line = err.strip().splitlines()[-1]
        assert line.startswith(f"laneway: {says}"), (command, err)
        lines.append(line)
    return lines


async def test_a_database_a_newer_laneway_migrated_is_one_line_and_nothing_runs(
    database_url: str, store: Store
) -> None:
    env = environment(database_url)
    code, out, err = await laneway("enqueue", "hello", "--params", '{"name": "Old"}', env=env)
    assert code == 0, err
    instance_id = UUID(json.loads(out)["instanceID"])
    async with store.connection() as conn:
        await conn.execute(
            "INSERT INTO laneway.schema_migrations (name) VALUES ('9999_from_a_newer_release')"
        )
    lines = await says_in_one_line(env, "the database was migrated by a newer Laneway")
    assert all("(9999_from_a_newer_release)" in line for line in lines), lines
    found = await store.get_instance(instance_id)
    assert found is not None
    assert (found.status, found.attempts) == (Status.PENDING, 0)  # no engine claimed it


async def test_a_role_that_only_runs_laneway_runs_the_worker_and_the_commands(
    database_url: str,
) -> None:
    # The owner migrated (the template); this role has no CREATE on the database.
    async with runtime_role(database_url) as role_url:
        env = environment(role_url)
        code, out, err = await laneway("migrate", env=env)
        assert code == 0, err
        assert json.loads(out)["applied"] == []
        worker = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "laneway", "worker", cwd=ROOT, env=env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            code, out, err = await laneway("enqueue", "hello", "--params", '{"name": "R"}', env=env)
            assert code == 0, err
            instance_id = json.loads(out)["instanceID"]
            async with asyncio.timeout(30):
                while True:
                    code, out, err = await laneway("status", instance_id, "--json", env=env)
                    assert code == 0, err
                    if json.loads(out)["status"] == "completed":
                        break
                    await asyncio.sleep(0.1)
        finally:
            worker.send_signal(signal.SIGTERM)
            async with asyncio.timeout(30):
                _, worker_err = await worker.communicate()
        assert worker.returncode == 0, worker_err.decode()


async def test_a_role_refused_a_privilege_or_a_connection_is_one_line_exit_1(
    database_url: str, admin: asyncpg.Connection
) -> None:
    async with runtime_role(database_url, connection_limit=0) as role_url:
        await says_in_one_line(environment(role_url), "cannot use the database: too many conn")
    # A migration pending (a new release started before `laneway migrate`): it cannot apply it
    # (and `status`, which never migrates, says that it is pending).
    last = migrations()[-1].name
    await admin.execute("DELETE FROM laneway.schema_migrations WHERE name = $1", last)
    async with runtime_role(database_url) as role_url:
        env = environment(role_url)
        lines = await says_in_one_line(
            env, "cannot use the database: permission denied for database", PROCESS_STARTS
        )
        await says_in_one_line(env, "migrations are pending", (("status", UNKNOWN_ID),), 3)
    assert all("the schema's owner" in line for line in lines), lines


@pytest.fixture
async def older_database_url(server_url: str) -> AsyncIterator[str]:
    """A database as the previous release left it: every migration but the newest applied."""
    name = f"o_{uuid.uuid4().hex[:12]}"
    url = await create_database(server_url, name)
    try:
        conn = await connect(url)
        try:
            await apply_migrations(conn, migrations()[:-1])
        finally:
            await conn.close()
        yield url
    finally:
        await drop_database(server_url, name)


async def _applied(url: str) -> list[str]:
    conn = await connect(url)
    try:
        if not await conn.fetchval("SELECT to_regclass('laneway.schema_migrations') IS NOT NULL"):
            return []
        return [r["name"] for r in await conn.fetch("SELECT name FROM laneway.schema_migrations")]
    finally:
        await conn.close()


async def test_no_instance_command_migrates_a_database_an_older_release_runs_on(
    older_database_url: str,
) -> None:
    # Found by an outside audit: the new release's `laneway preflight`, run against production
    # before the rollout as the docs say, migrated the database (as did status, workflows and
    # queues), and the old release's workers stopped at their next heartbeat.
    env = environment(older_database_url)
    newest = migrations()[-1].name
    lines = await says_in_one_line(env, "migrations are pending", INSTANCE_COMMANDS, 3)
    assert all(f"it lacks 1 of the migrations this release ships: {newest})" in x for x in lines)
    assert all("--url" in line and "laneway migrate" in line for line in lines), lines
    assert newest not in await _applied(older_database_url)  # the schema is as it was
    code, out, err = await laneway("migrate", env=env)  # what does migrate: migrate
    assert code == 0, err
    assert json.loads(out)["applied"] == [newest]
    code, _, err = await laneway("status", UNKNOWN_ID, env=env)
    assert (code, err.strip()) == (1, f"laneway: no instance {UNKNOWN_ID}")


async def test_migrate_warns_of_live_engines_of_the_older_release(
    older_database_url: str,
) -> None:
    # An upgrade audit: `laneway migrate` run while the older release's engines still ran (step
    # 1 of the upgrade skipped) said nothing on stderr, though deploying.md says it warns, as a
    # start does: the command's logging passed errors only.
    conn = await connect(older_database_url)
    try:
        await conn.execute(queries.HEARTBEAT_WORKER, "old-worker", "worker", "h", 1, ["noop"],
                           2, 10, 5.0, [])  # fmt: skip
    finally:
        await conn.close()
    code, out, err = await laneway("migrate", env=environment(older_database_url))
    assert code == 0, err
    assert json.loads(out)["applied"] == [migrations()[-1].name]
    (line,) = err.splitlines()
    assert line.startswith(
        "laneway: warning: migrating while engines of an older release are live  engines=1"
    ), err


async def test_an_instance_command_creates_no_schema_in_an_empty_database(
    server_url: str,
) -> None:
    name = f"e_{uuid.uuid4().hex[:12]}"
    url = await create_database(server_url, name)
    try:
        (line,) = await says_in_one_line(
            environment(url), "the database has no Laneway schema yet", (("queues",),), 3
        )
        assert "run `laneway migrate` first" in line
        # Which database to migrate: DATABASE_URL's, its password hidden.
        assert f"(DATABASE_URL {redact_url(url)})" in line, line
        assert await _applied(url) == []
    finally:
        await drop_database(server_url, name)


async def test_an_instance_command_names_the_embedded_database_it_found_without_schema() -> None:
    # A newcomer with no DATABASE_URL: the command starts the embedded PostgreSQL in
    # ./.laneway, finds no schema, and must say it was that one, so `laneway migrate` is run
    # where it migrates the same one. (A short folder: the server's socket lives in it.)
    folder = Path(tempfile.mkdtemp(prefix="lw-"))
    try:
        env = environment(None, LANEWAY_DATA_DIR=str(folder / ".laneway"))
        (line,) = await says_in_one_line(
            env, "the database has no Laneway schema yet", (("queues",),), 3
        )
        where = f"(the embedded PostgreSQL in {(folder / '.laneway').resolve()}, as DATABASE_URL"
        assert where in line, line
    finally:
        shutil.rmtree(folder, ignore_errors=True)
