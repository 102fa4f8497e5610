"""Several engines on one database, each on its own pool, as separate processes would be."""

import contextlib
from collections.abc import AsyncIterator

from laneway.engine import Engine, Workflow
from laneway.store import open_store
from tests.engine.helpers import make_engine


@contextlib.asynccontextmanager
async def running_engines(
    database_url: str,
    count: int,
    *workflows: Workflow,
    prefix: str,
    poll_seconds: float = 0.05,
    pool_size: int = 3,
) -> AsyncIterator[list[Engine]]:
    """`count` engines (owners `<prefix>-<n>`) running `workflows` until the block ends."""
    async with contextlib.AsyncExitStack() as stack:
        engines = []
        for n in range(count):
            store = await stack.enter_async_context(open_store(database_url, pool_size=pool_size))
            engines.append(
                make_engine(
                    store, *workflows, owner_id=f"{prefix}-{n}", poll_interval_seconds=poll_seconds
                )
            )
        for engine in engines:
            await stack.enter_async_context(engine.running())
        yield engines
