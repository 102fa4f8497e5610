"""`laneway` against a database it must not run on as it stands: one line, and nothing runs.

A database a newer release migrated, and (with a role that only runs Laneway) what such a
role may and may not do. The databases it cannot reach at all are in test_cli.py.
"""

import json
from uuid import UUID

from laneway.model import Status
from laneway.store import Store
from tests.test_cli import environment, laneway


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
    for command in (
        ("migrate",),
        ("worker",),
        ("serve", "--port", "0"),
        ("status", str(instance_id)),
    ):
        code, _, err = await laneway(*command, env=env)
        assert code == 1, (command, err)
        assert (
            err.strip()
            .splitlines()[-1]
            .startswith("laneway: the database was migrated by a newer Laneway")
        ), (command, err)
        assert "9999_from_a_newer_release" in err, (command, err)
        assert "Traceback" not in err, (command, err)
        if command[0] != "serve":  # serve logs its start and stop around the line
            assert len(err.strip().splitlines()) == 1, (command, err)
    found = await store.get_instance(instance_id)
    assert found is not None
    assert (found.status, found.attempts) == (Status.PENDING, 0)  # no engine claimed it
