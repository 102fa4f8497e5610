"""laneway/store/sql/functions.sql is the current text of every function the migrations leave.

A database migrated from empty (the test template) is compared with the same database whose
functions were dropped and re-created from the file alone, function by function, through
pg_get_functiondef (body, arguments, result, language, settings). The file must hold every
function and nothing else, and each must be exactly what the migrations made.
"""

import re

import asyncpg

from laneway.store.migrate import current_functions_sql

FUNCTIONS = """
SELECT p.oid::regprocedure::text AS signature, pg_get_functiondef(p.oid) AS definition
  FROM pg_proc AS p
 WHERE p.pronamespace = 'laneway'::regnamespace
 ORDER BY 1
"""


def _normalised(definition: str) -> str:
    # pg_get_functiondef keeps the body byte for byte; only trailing blanks are forgiven.
    return "\n".join(line.rstrip() for line in definition.strip().splitlines())


async def _definitions(conn: asyncpg.Connection) -> dict[str, str]:
    return {row["signature"]: _normalised(row["definition"]) for row in await conn.fetch(FUNCTIONS)}


async def _definitions_from(conn: asyncpg.Connection, sql: str) -> dict[str, str]:
    """The schema's functions when only `sql` creates them (rolled back afterwards)."""
    transaction = conn.transaction()
    await transaction.start()
    try:
        for signature in await _definitions(conn):
            await conn.execute(f"DROP FUNCTION {signature}")
        await conn.execute(sql)
        return await _definitions(conn)
    finally:
        await transaction.rollback()


async def test_every_function_is_as_the_current_file_says(admin: asyncpg.Connection) -> None:
    migrated = await _definitions(admin)
    from_file = await _definitions_from(admin, current_functions_sql())
    assert sorted(from_file) == sorted(migrated)  # none missing, none extra
    for signature, definition in migrated.items():
        assert from_file[signature] == definition, f"{signature} differs from functions.sql"
    assert await _definitions(admin) == migrated  # the comparison left the schema as it was


async def test_the_comparison_sees_a_changed_body(admin: asyncpg.Connection) -> None:
    # What a migration that changed a function without changing the file would look like.
    changed = current_functions_sql().replace("claimed.priority DESC", "claimed.priority ASC")
    assert changed != current_functions_sql()
    from_file = await _definitions_from(admin, changed)
    assert (
        from_file["laneway.claim(text,text[],integer,double precision,bigint)"]
        != (
            (await _definitions(admin))[
                "laneway.claim(text,text[],integer,double precision,bigint)"
            ]
        )
    )


async def test_the_comparison_sees_a_lost_setting(admin: asyncpg.Connection) -> None:
    # The hot paths' plan settings are part of a definition too (tests/store/test_migrate.py).
    changed = current_functions_sql().replace("SET jit = off\n", "", 1)
    from_file = await _definitions_from(admin, changed)
    assert from_file != await _definitions(admin)


def test_the_file_names_each_function_once() -> None:
    names = re.findall(
        r"^CREATE OR REPLACE FUNCTION (laneway\.\w+)\(", current_functions_sql(), re.MULTILINE
    )
    assert names == sorted(set(names), key=names.index)  # no function written twice
    assert {"laneway.append_events", "laneway.claim", "laneway.write_runner_batch"} <= set(names)
