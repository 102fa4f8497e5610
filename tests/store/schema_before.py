"""A throwaway database migrated up to (not including) a given migration: the schema a
release before it ran on, for tests of what its processes still send after that migration."""

import contextlib
import uuid
from collections.abc import AsyncIterator

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
