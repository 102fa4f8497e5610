"""The asyncpg pool and per-connection setup: JSON codecs, application name, timeouts.

Owns how a connection is made. Does not run Laneway queries (store.py does).
"""

import json
from dataclasses import dataclass
from typing import Any

import asyncpg

APPLICATION_NAME = "laneway"


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Server-side guard rails in milliseconds (0 turns one off; RELIABILITY F10).

    A statement that runs away, a lock wait that would stall a claim, or a transaction left
    open by a stuck client is ended by PostgreSQL itself, whatever the client is doing.
    """

    statement_ms: int = 30_000
    lock_ms: int = 2_000
    idle_in_transaction_ms: int = 60_000


DEFAULT_TIMEOUTS = Timeouts()
# Migrations wait for each other on an advisory lock and may rewrite large tables.
MIGRATION_TIMEOUTS = Timeouts(statement_ms=0, lock_ms=0, idle_in_transaction_ms=60_000)


async def setup_connection(conn: asyncpg.Connection) -> None:
    """Decode json/jsonb to Python values; inputs go in as text the engine already encoded."""
    for type_name in ("json", "jsonb"):
        await conn.set_type_codec(
            type_name, schema="pg_catalog", encoder=_encode_json, decoder=json.loads
        )


def _encode_json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, allow_nan=False)


def server_settings(
    application_name: str = APPLICATION_NAME, timeouts: Timeouts = DEFAULT_TIMEOUTS
) -> dict[str, str]:
    """Guard rails every Laneway connection gets (STYLE C4; RELIABILITY §0.7)."""
    return {
        "application_name": application_name,
        "idle_in_transaction_session_timeout": str(timeouts.idle_in_transaction_ms),
        "lock_timeout": str(timeouts.lock_ms),
        "statement_timeout": str(timeouts.statement_ms),
    }


async def _keep_session(conn: asyncpg.Connection) -> None:
    # Laneway's pooled connections hold no session state (no LISTEN, no session locks, no
    # SET), so the default reset (UNLISTEN *, RESET ALL, ...) would be a wasted round trip
    # on every release.
    return None


async def create_pool(
    database_url: str,
    *,
    size: int = 10,
    application_name: str = APPLICATION_NAME,
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
) -> asyncpg.Pool:
    """A pool whose connections decode JSON and carry Laneway's timeouts."""
    pool = await asyncpg.create_pool(
        database_url,
        min_size=1,
        max_size=size,
        init=setup_connection,
        reset=_keep_session,
        server_settings=server_settings(application_name, timeouts),
        command_timeout=60,
    )
    assert pool is not None
    return pool


async def connect(
    database_url: str,
    *,
    application_name: str = APPLICATION_NAME,
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
) -> asyncpg.Connection:
    """One connection outside the pool (for LISTEN and for migrations)."""
    conn = await asyncpg.connect(
        database_url, server_settings=server_settings(application_name, timeouts)
    )
    await setup_connection(conn)
    return conn
