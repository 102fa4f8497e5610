"""Applies migrations/ in order under a session advisory lock, recording each one.

Owns the migration runner. Migrations are numbered .sql files, append-only, one transaction
each; concurrent starters wait on the lock and find nothing left to do.
"""

import logging
from collections.abc import Sequence
from pathlib import Path

import asyncpg

from app.store import queries

logger = logging.getLogger(__name__)

MIGRATIONS_LOCK_KEY = 7_461_726_101  # any constant; shared by every Laneway process
MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"


def migration_files(directory: Path = MIGRATIONS_DIR) -> list[Path]:
    """The migration files, in the order they apply."""
    return sorted(directory.glob("[0-9][0-9][0-9][0-9]_*.sql"))


async def apply_migrations(
    conn: asyncpg.Connection, files: Sequence[Path] | None = None
) -> list[str]:
    """Apply every migration not yet recorded; return the names applied now."""
    files = migration_files() if files is None else files
    applied_now: list[str] = []
    await conn.execute(queries.LOCK_MIGRATIONS, MIGRATIONS_LOCK_KEY)
    try:
        await conn.execute(queries.CREATE_MIGRATIONS_TABLE)
        applied = {row["name"] for row in await conn.fetch(queries.APPLIED_MIGRATIONS)}
        for file in sorted(files):
            if file.stem in applied:
                continue
            async with conn.transaction():
                await conn.execute(file.read_text())
                await conn.execute(queries.RECORD_MIGRATION, file.stem)
            logger.info("migration applied", extra={"migration": file.stem})
            applied_now.append(file.stem)
    finally:
        await conn.execute(queries.UNLOCK_MIGRATIONS, MIGRATIONS_LOCK_KEY)
    return applied_now
