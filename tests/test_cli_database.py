"""`laneway` against a database it must not run on as it stands: one line, and nothing runs.

A database a newer release migrated, and (with a role that only runs Laneway) what such a
role may and may not do. The databases it cannot reach at all are in test_cli.py.
"""

import asyncio
import json
import signal
import sys
from uuid import UUID

import asyncpg

from laneway.model import Status
from laneway.store import Store
from laneway.store.migrate import migrations
from tests.runtime_role import runtime_role
from tests.test_cli import ROOT, environment, laneway

UNKNOWN_ID = "00000000-0000-7000-8000-000000000000"
EVERY_START = (("migrate",), ("status", UNKNOWN_ID), ("worker",), ("serve", "--port", "0"))


async def says_in_one_line(env: dict[str, str], says: str) -> list[str]:
    """Run every kind of start; each must exit 1 with its one line (serve logs its start and
    stop around it, no traceback). Returns the lines."""
    lines = []
    for command in EVERY_START:
        code, _, err = await laneway(*command, env=env)
        assert code == 1, (command, err)
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
    # A migration pending (a new release started before `laneway migrate`): it cannot apply it.
    last = migrations()[-1].name
    await admin.execute("DELETE FROM laneway.schema_migrations WHERE name = $1", last)
    async with runtime_role(database_url) as role_url:
        lines = await says_in_one_line(
            environment(role_url), "cannot use the database: permission denied for database"
        )
    assert all("the schema's owner" in line for line in lines), lines
