"""A client process for the fault points that fire on the API side (cancel_transition).

`python -m tests.chaos.client cancel DATABASE_URL ID...` cancels the instances through the
engine, as an API process would; with LANEWAY_FAULTS armed it dies where the fault says.
"""

import asyncio
import sys
from uuid import UUID

from laneway.engine import Engine, WorkflowRegistry
from laneway.store import open_store
from tests.chaos.workflows import w3, wp


async def cancel(database_url: str, instance_ids: list[UUID]) -> None:
    async with open_store(database_url, application_name="chaos-canceller") as store:
        engine = Engine(store, WorkflowRegistry([w3, wp]))
        for instance_id in instance_ids:
            await engine.cancel(instance_id)


if __name__ == "__main__":
    command, url, *ids = sys.argv[1:]
    if command != "cancel":
        raise SystemExit(f"unknown command {command!r}")
    asyncio.run(cancel(url, [UUID(i) for i in ids]))
