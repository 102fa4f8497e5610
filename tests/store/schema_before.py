"""A throwaway database migrated up to (not including) a given migration: the schema a
release before it ran on, for tests of what its processes still send after that migration."""

import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence

import asyncpg

from laneway.store.databases import database_url_for
from laneway.store.migrate import apply_migrations, migrations
from laneway.store.pool import connect


@contextlib.asynccontextmanager
async def database_before(server_url: str, migration: str) -> AsyncIterator[str]:
    """The URL of a new database migrated up to the migration before `migration` (dropped
    afterwards)."""
    name = f"r_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        url = database_url_for(server_url, name)
        conn = await connect(url)
        try:
            await apply_migrations(conn, [m for m in migrations() if m.name < migration])
        finally:
            await conn.close()
        yield url
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@contextlib.asynccontextmanager
async def prepared_across_migrations(
    url: str, statements: Sequence[str], empty: Sequence[object], runs: Sequence[object]
) -> AsyncIterator[tuple[list[asyncpg.prepared_stmt.PreparedStatement], list[str]]]:
    """The old group-commit `statements` (the batch, then the batch and claim) prepared on a
    connection to `url` and run once with the `empty` batch's arguments (the claim's with
    `runs` after them), so that the connection holds their plans as a live process of the old
    release does; then the pending migrations applied from another connection. Yields the
    prepared statements, still on that first connection, and the migrations applied."""
    old = await connect(url)
    try:
        prepared = [await old.prepare(statement) for statement in statements]
        assert await prepared[0].fetch(*empty) == []
        assert await prepared[1].fetch(*empty, *runs) == []
        migrate = await connect(url)
        try:
            applied = await apply_migrations(migrate)
        finally:
            await migrate.close()
        yield prepared, applied
    finally:
        await old.close()
