"""Applies the schema's migrations in order under a session advisory lock, recording each one.

Owns the migration runner and `migrate()`, the public call that brings a database up to date.
Migrations are numbered .sql files, append-only, one transaction each, read from the package
`laneway.migrations` (the repository's top-level migrations/, carried inside the wheel), so an
installed Laneway finds them as an editable checkout does. Concurrent starters wait on the
lock and find nothing left to do; a database that records a migration not shipped here (a
newer release migrated it) is refused. `require_migrated` checks the same without applying
anything, for what must never migrate (the command line's instance commands). Also reads
laneway/store/sql/functions.sql, the current text of every function the migrations leave (for
reading and for the test that they agree).
"""

import functools
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from laneway.errors import (
    DatabaseNewerError,
    MigrationFailedError,
    MigrationsMissingError,
    MigrationsPendingError,
)
from laneway.store import queries
from laneway.store.pool import MIGRATION_TIMEOUTS, connect

logger = logging.getLogger(__name__)

MIGRATIONS_LOCK_KEY = 7_461_726_101  # any constant; shared by every Laneway process
MIGRATIONS_PACKAGE = "laneway.migrations"
MIGRATION_NAME = re.compile(r"[0-9]{4}_[a-z0-9_]+\.sql")
CURRENT_FUNCTIONS = ("sql", "functions.sql")  # inside laneway.store


@dataclass(frozen=True, slots=True, kw_only=True)
class Migration:
    """One numbered SQL file: its name without `.sql`, and its text."""

    name: str
    sql: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MigrationReport:
    """What `migrate()` did: the migrations applied now, and the schema version after them."""

    database: str  # the URL without its password
    applied: list[str]
    version: str


def migrations(package: str | None = None) -> list[Migration]:
    """The migrations Laneway ships (in `laneway.migrations`), in the order they apply.

    Raises:
        MigrationsMissingError: the package holds no migration file (a broken install).
    """
    package = package or MIGRATIONS_PACKAGE
    try:
        folder = resources.files(package)
    except ModuleNotFoundError:
        raise MigrationsMissingError(package) from None
    found = sorted(
        (entry for entry in folder.iterdir() if MIGRATION_NAME.fullmatch(entry.name)),
        key=lambda entry: entry.name,
    )
    if not found:
        raise MigrationsMissingError(package)
    return [
        Migration(name=entry.name.removesuffix(".sql"), sql=entry.read_text(encoding="utf-8"))
        for entry in found
    ]


@functools.cache
def shipped_names() -> frozenset[str]:
    """The names of the migrations this installation ships (read once)."""
    return frozenset(m.name for m in migrations())


def current_functions_sql() -> str:
    """The text of laneway/store/sql/functions.sql: every function as the migrations leave it."""
    return resources.files("laneway.store").joinpath(*CURRENT_FUNCTIONS).read_text(encoding="utf-8")


async def apply_migrations(
    conn: asyncpg.Connection, pending: Sequence[Migration] | None = None
) -> list[str]:
    """Apply every migration of `pending` (default: those this Laneway ships) not yet
    recorded; return the names applied now.

    With nothing pending it runs no DDL and takes no lock: PostgreSQL checks CREATE on the
    database for CREATE SCHEMA IF NOT EXISTS even when the schema exists, and a runtime role
    without it (the owner migrates, the app role runs) must still start.

    Raises:
        DatabaseNewerError: the database records migrations `pending` does not hold.
        MigrationFailedError: the database refused a migration's SQL.
    """
    pending = migrations() if pending is None else pending
    if await conn.fetchval(queries.MIGRATIONS_TABLE_EXISTS):
        applied = {row["name"] for row in await conn.fetch(queries.APPLIED_MIGRATIONS)}
        refuse_unknown(applied, pending)
        if {m.name for m in pending} <= applied:
            return []
    applied_now: list[str] = []
    await conn.execute(queries.LOCK_MIGRATIONS, MIGRATIONS_LOCK_KEY)
    try:
        await conn.execute(queries.CREATE_MIGRATIONS_TABLE)
        applied = {row["name"] for row in await conn.fetch(queries.APPLIED_MIGRATIONS)}
        refuse_unknown(applied, pending)
        due = [m for m in sorted(pending, key=lambda m: m.name) if m.name not in applied]
        await _warn_of_live_engines(conn, due)
        for migration in due:
            try:
                async with conn.transaction():
                    await conn.execute(migration.sql)
                    await conn.execute(queries.RECORD_MIGRATION, migration.name)
            except asyncpg.InsufficientPrivilegeError:
                raise  # a role without DDL rights: the CLI says which grants it needs
            except asyncpg.PostgresError as exc:  # the database's own refusal of the SQL
                reason = f"{type(exc).__name__}: {exc}"
                raise MigrationFailedError(migration.name, reason) from exc
            logger.info("migration applied", extra={"migration": migration.name})
            applied_now.append(migration.name)
    finally:
        await conn.execute(queries.UNLOCK_MIGRATIONS, MIGRATIONS_LOCK_KEY)
    return applied_now


async def _warn_of_live_engines(conn: asyncpg.Connection, due: Sequence[Migration]) -> None:
    """Say so when engines are live as `due` is applied: they are of an older release, which
    docs/deploying.md#upgrading says to stop first; each stops at its next heartbeat once
    the schema is newer than its own, and its runs come back after their leases."""
    if not due or not await conn.fetchval(queries.WORKERS_TABLE_EXISTS):
        return
    live = await conn.fetchval(queries.LIVE_ENGINES)
    if live:
        logger.warning(
            "migrating while engines of an older release are live",
            extra={"engines": live, "migrations": [m.name for m in due]},
        )


async def pending_migrations(
    conn: asyncpg.Connection, shipped: Sequence[Migration] | None = None
) -> tuple[list[str], bool]:
    """The migrations of `shipped` (default: those this Laneway ships) that the database has
    not applied, in order, and whether it has no Laneway schema at all. Reads only: no DDL, no
    lock.

    Raises:
        DatabaseNewerError: the database records migrations `shipped` does not hold.
    """
    shipped = migrations() if shipped is None else shipped
    fresh = not await conn.fetchval(queries.MIGRATIONS_TABLE_EXISTS)
    applied: set[str] = set()
    if not fresh:
        applied = {row["name"] for row in await conn.fetch(queries.APPLIED_MIGRATIONS)}
        refuse_unknown(applied, shipped)
    return sorted(m.name for m in shipped if m.name not in applied), fresh


async def require_migrated(database_url: str) -> None:
    """Check that the database at `database_url` has every migration this Laneway ships,
    without applying any: a command that must not change the schema under the processes of
    the release running there calls it before it opens a store, whose migration step then
    finds nothing to do and runs no DDL (migrations are never taken back, so nothing can
    become pending in between).

    Raises:
        MigrationsPendingError: some are not applied (or the database has no Laneway schema).
        DatabaseNewerError: a newer Laneway migrated the database.
    """
    conn = await connect(database_url)
    try:
        pending, fresh = await pending_migrations(conn)
    finally:
        await conn.close()
    if pending:
        raise MigrationsPendingError(pending, fresh=fresh)


def refuse_unknown(applied: set[str], shipped: Sequence[Migration]) -> None:
    """Refuse a database that records migrations not shipped here: a newer Laneway applied
    them, and may have replaced functions this code calls (by their signature, as
    0021_group_commit_operations did laneway.write_runner_batch).

    Raises:
        DatabaseNewerError: some applied migration is not in `shipped`, named in order.
    """
    unknown = sorted(applied - {m.name for m in shipped})
    if unknown:
        raise DatabaseNewerError(unknown)


async def migrate(database_url: str) -> MigrationReport:
    """Bring the database at `database_url` up to Laneway's current schema.

    Safe to call from many processes at once, and a no-op when nothing is pending.

    Raises:
        MigrationsMissingError: this installation carries no migration files.
        DatabaseNewerError: a newer Laneway migrated the database.
        MigrationFailedError: the database refused a migration's SQL (nothing of that one is
            applied; those before it stay applied).
    """
    shipped = migrations()  # refuse before touching the database
    conn = await connect(database_url, timeouts=MIGRATION_TIMEOUTS)
    try:
        applied = await apply_migrations(conn, shipped)
        version = await conn.fetchval(queries.SCHEMA_VERSION)
    finally:
        await conn.close()
    return MigrationReport(database=redact_url(database_url), applied=applied, version=version)


_SECRET_PARAMETER = re.compile(r"(?i)(^|&)((?:ssl)?password)=[^&]*")


def redact_url(database_url: str) -> str:
    """The URL with its passwords replaced by `***`, for logs and messages: the one in its
    userinfo, and libpq's `password` and `sslpassword` parameters in its query."""
    parts = urlsplit(database_url)
    netloc = parts.netloc
    if parts.password:
        userinfo, _, host_and_port = netloc.rpartition("@")
        netloc = f"{userinfo.partition(':')[0]}:***@{host_and_port}"
    query = _SECRET_PARAMETER.sub(r"\1\2=***", parts.query)
    if (netloc, query) == (parts.netloc, parts.query):
        return database_url
    return urlunsplit(parts._replace(netloc=netloc, query=query))
