"""A worker process for the per-key cap test: one engine on a shared database, run until done.

Run as `python -m tests.engine.key_worker` from the repository root, with KEY_WORKER_URL (the
database), KEY_WORKER_OWNER (its owner id) and KEY_WORKER_EXPECTED (how many `keyed`
instances must be completed before it stops). Each instance it runs holds its slot for
HOLD_SECONDS and records this process's owner id in its result, so the test can tell which
process ran it.
"""

import asyncio
import os

from laneway.engine import Done, HandlerContext, Workflow
from laneway.model import Status
from laneway.store import Store, open_store
from tests.engine.helpers import eventually, make_engine

HOLD_SECONDS = 0.15
QUEUE = "tenants"
# Fewer than the queue's 10 slots: a process that holds every slot is woken the moment one
# of its own runs ends and claims the slot again before another process's poll comes round,
# so with more it would run everything alone. With 8 each, the two together can exceed the
# queue's cap, so the cap across processes is what holds them.
LOCAL_CONCURRENCY = 8


def keyed_workflow(owner: str) -> Workflow:
    """`keyed`: holds a slot of queue `tenants` for HOLD_SECONDS, then completes with `owner`."""

    async def hold(ctx: HandlerContext, params: object) -> Done:
        await asyncio.sleep(HOLD_SECONDS)  # the work: it holds its slot this long
        return Done({"owner": owner})

    return Workflow("keyed", handlers={"run": hold}, initial="run", queue=QUEUE)


async def completed(store: Store) -> int:
    async with store.connection() as conn:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM laneway.instances WHERE name = 'keyed' AND status = $1",
            Status.COMPLETED.value,
        )
    return count


async def main() -> None:
    url = os.environ["KEY_WORKER_URL"]
    owner = os.environ["KEY_WORKER_OWNER"]
    expected = int(os.environ["KEY_WORKER_EXPECTED"])
    async with open_store(url) as store:
        engine = make_engine(
            store,
            keyed_workflow(owner),
            owner_id=owner,
            poll_interval_seconds=0.02,
            concurrency=LOCAL_CONCURRENCY,
        )
        async with engine.running():
            await eventually(lambda: completed(store), lambda n: n >= expected, timeout=60)
    print("done", owner, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
