"""A role that only runs Laneway (no DDL), for the tests of what such a role can do.

Its grants are the block docs/deploying.md gives operators, run as it is written there, so
the documented grants are the tested ones.
"""

import contextlib
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

DEPLOYING = Path(__file__).resolve().parents[1] / "docs" / "deploying.md"
DOCUMENTED_ROLE = "laneway_app"


def documented_grants() -> str:
    """The SQL block of docs/deploying.md that grants the runtime role its privileges."""
    blocks: list[str] = re.findall(r"```sql\n(.*?)```", DEPLOYING.read_text(), flags=re.DOTALL)
    found = [block for block in blocks if f"TO {DOCUMENTED_ROLE};" in block]
    assert len(found) == 1, f"one grants block in {DEPLOYING}, found {len(found)}"
    return found[0]


def url_as(database_url: str, role: str) -> str:
    """The same database, as `role` (the test server trusts local logins)."""
    parts = urlsplit(database_url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{role}@{host}"))


@contextlib.asynccontextmanager
async def runtime_role(database_url: str, *, connection_limit: int = -1) -> AsyncIterator[str]:
    """A new login role (a generated name) with the documented grants on the migrated database
    of `database_url` and no CREATE on it; yields the URL as that role, then drops the role."""
    name = f"laneway_app_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(database_url)
    try:
        await admin.execute(f"CREATE ROLE {name} LOGIN CONNECTION LIMIT {connection_limit}")
        try:
            await admin.execute(documented_grants().replace(DOCUMENTED_ROLE, name))
            assert not await admin.fetchval(
                "SELECT has_database_privilege($1, current_database(), 'CREATE')", name
            )
            yield url_as(database_url, name)
        finally:
            await admin.execute(f"DROP OWNED BY {name}")  # its grants and default privileges
            await admin.execute(f"DROP ROLE {name}")
    finally:
        await admin.close()
