"""Running one `laneway` subcommand both ways a user can: on the database (DATABASE_URL and
LANEWAY_WORKFLOWS) and through a server (--url, with no database or workflows of its own).

Owns `both_ways`, the parameter a test takes to run the same steps each way, and `ways`, which
opens the chosen one; the server is a real uvicorn in the test's loop, its engine off (a test
runs its own in-process when it needs one).
"""

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from tests.api.conftest import live_server, make_settings
from tests.test_cli import environment, laneway
from tests.test_cli_remote import client_env, url_of

Run = Callable[..., Awaitable[tuple[int, str, str]]]
"""`await run(*args)`: the subcommand's exit code, stdout and stderr."""

both_ways = pytest.mark.parametrize("way", ["database", "url"])


@asynccontextmanager
async def ways(way: str, database_url: str) -> AsyncIterator[Run]:
    """A runner of `laneway ARGS` on the database (`way` "database") or through a server on it
    ("url"); tables 120 columns wide."""
    if way == "database":
        env = environment(database_url, COLUMNS="120")

        async def on_database(*args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
            return await laneway(*args, env=env, stdin=stdin)

        yield on_database
        return
    async with live_server(make_settings(database_url, engine_enabled=False)) as server:

        async def through_server(*args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
            return await laneway(*args, "--url", url_of(server), env=client_env(), stdin=stdin)

        yield through_server
