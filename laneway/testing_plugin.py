"""The pytest plugin of laneway.testing: its hooks and fixtures.

Owns the fixtures of `pytest_plugins = ["laneway.testing"]` (laneway.testing re-exports them,
with the hooks, when pytest and pytest-asyncio are installed, and pytest finds them there): a
migrated throwaway database per test, on LANEWAY_TEST_DATABASE_URL or an embedded server, and
engines on it (EngineFactory, testing_engines.py); and a session that a SIGTERM ends as Ctrl-C
does, so its databases and server are cleaned up. Needs pytest and pytest-asyncio; the helpers
of laneway.testing need neither.
"""

import asyncio
import os
import signal
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from types import FrameType

import pytest
import pytest_asyncio

from laneway.store.databases import create_database, drop_database, throwaway_server
from laneway.testing_engines import EngineFactory

_sigterm_interrupts = pytest.StashKey[bool]()


def _interrupt_on_sigterm(signum: int, frame: FrameType | None) -> None:
    # A repeat must not cut the clean-up short (`timeout` sends SIGTERM twice, a CI runner to
    # every process of the job): it is ignored from now on. SIGKILL still ends a stuck one.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def pytest_configure(config: pytest.Config) -> None:
    """Have SIGTERM (a timeout, a cancelled CI job) end the session as Ctrl-C does.

    A terminated process runs no fixture teardown: the embedded server, its temporary folder
    and the databases on LANEWAY_TEST_DATABASE_URL would stay. An interrupted session tears
    down as usual. Each process does this for itself (xdist workers included, which run
    tests in their main thread); a SIGTERM handler someone else installed is left alone.
    """
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set there
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt_on_sigterm)
        config.stash[_sigterm_interrupts] = True


def pytest_unconfigure(config: pytest.Config) -> None:
    """Give SIGTERM back the default handler it had before the session."""
    if config.stash.get(_sigterm_interrupts, False) and signal.getsignal(signal.SIGTERM) in (
        _interrupt_on_sigterm,
        signal.SIG_IGN,
    ):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.fixture(scope="session")
def laneway_server_url() -> Iterator[str]:
    """Admin URL of the PostgreSQL server for the tests: LANEWAY_TEST_DATABASE_URL when set,
    else an embedded server in a temporary folder, stopped after the session.

    Override this fixture to point the plugin at a server you already have.
    """
    with throwaway_server(os.environ.get("LANEWAY_TEST_DATABASE_URL")) as url:
        yield url


# Session fixtures are synchronous (asyncio.run inside): test event loops are per test.
@pytest.fixture(scope="session")
def laneway_template_name(laneway_server_url: str) -> Iterator[str]:
    """A database migrated once per session, cloned for every test."""
    name = f"laneway_template_{uuid.uuid4().hex[:12]}"
    asyncio.run(create_database(laneway_server_url, name, migrate=True))
    try:
        yield name
    finally:
        asyncio.run(drop_database(laneway_server_url, name))


@pytest_asyncio.fixture
async def laneway_database_url(
    laneway_server_url: str, laneway_template_name: str
) -> AsyncIterator[str]:
    """A fresh, migrated database for one test, dropped after it."""
    name = f"laneway_test_{uuid.uuid4().hex[:12]}"
    url = await create_database(laneway_server_url, name, template=laneway_template_name)
    try:
        yield url
    finally:
        await drop_database(laneway_server_url, name)


@pytest_asyncio.fixture
async def laneway_engine_factory(laneway_database_url: str) -> AsyncIterator[EngineFactory]:
    """`await laneway_engine_factory(*workflows, **engine_options)` → an Engine on this
    test's database; its store is closed after the test."""
    factory = EngineFactory(laneway_database_url)
    try:
        yield factory
    finally:
        await factory.aclose()
