"""The asyncpg pool and per-connection setup: JSON codecs, application name, timeouts.

Owns how a connection is made. Does not run Laneway queries (store.py does).
"""

import json
from typing import Any

import asyncpg

APPLICATION_NAME = "laneway"


async def setup_connection(conn: asyncpg.Connection) -> None:
    """Decode json/jsonb to Python values; inputs go in as text the engine already encoded."""
    for type_name in ("json", "jsonb"):
        await conn.set_type_codec(
            type_name, schema="pg_catalog", encoder=_encode_json, decoder=json.loads
        )


def _encode_json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, allow_nan=False)


def server_settings(application_name: str = APPLICATION_NAME) -> dict[str, str]:
    """Guard rails every Laneway connection gets (STYLE C4; RELIABILITY §0.7)."""
    return {
        "application_name": application_name,
        "idle_in_transaction_session_timeout": "60000",
        "lock_timeout": "30000",
        "statement_timeout": "60000",
    }


async def _keep_session(conn: asyncpg.Connection) -> None:
    # Laneway's pooled connections hold no session state (no LISTEN, no session locks, no
    # SET), so the default reset (UNLISTEN *, RESET ALL, ...) would be a wasted round trip
    # on every release.
    return None


async def create_pool(
    database_url: str, *, size: int = 10, application_name: str = APPLICATION_NAME
) -> asyncpg.Pool:
    """A pool whose connections decode JSON and carry Laneway's timeouts."""
    pool = await asyncpg.create_pool(
        database_url,
        min_size=1,
        max_size=size,
        init=setup_connection,
        reset=_keep_session,
        server_settings=server_settings(application_name),
        command_timeout=60,
    )
    assert pool is not None
    return pool


async def connect(
    database_url: str, *, application_name: str = APPLICATION_NAME
) -> asyncpg.Connection:
    """One connection outside the pool (for LISTEN and for migrations)."""
    conn = await asyncpg.connect(database_url, server_settings=server_settings(application_name))
    await setup_connection(conn)
    return conn
