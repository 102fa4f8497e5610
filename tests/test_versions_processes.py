"""Two versions of one workflow side by side in two real worker processes (issue #21): the
instances in flight on version 1 finish on version 1's process while new ones start and finish
on version 2's; a version-1 instance with no version-1 worker alive waits with
VERSION_UNAVAILABLE, and runs once one comes back."""

import asyncio
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from laneway.engine import WorkflowRegistry
from laneway.engine.engine import Engine
from laneway.model import Status
from laneway.store import Store
from tests.engine.helpers import eventually, until_status
from tests.test_cli import ROOT, environment
from tests.versioned_workflows import deploy_demo


@asynccontextmanager
async def worker(database_url: str, module: str) -> AsyncIterator[int]:
    """A `laneway worker` process running the workflows of `module`; yields its pid, and stops
    it with SIGTERM (a clean stop takes it out of the workers registry)."""
    env = environment(database_url, LANEWAY_WORKFLOWS=module, PYTHONPATH=str(ROOT))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "laneway", "worker", cwd=ROOT, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        yield process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            _, err = await process.communicate()
        assert process.returncode == 0, err.decode()


async def live_versions(engine: Engine) -> set[tuple[str, str]]:
    return {pair for w in await engine.workers() for pair in w.versions}


async def test_old_runs_finish_on_old_code_while_new_ones_start_on_new_code(
    database_url: str, store: Store
) -> None:
    # The enqueuing side (an API process, say) has both versions: it starts the newest.
    both = Engine(store, WorkflowRegistry([deploy_demo("1"), deploy_demo("2")]))
    async with worker(database_url, "tests.versioned_v1") as v1_pid:
        old = [(await both.enqueue("deploy_demo", version="1")).instance_id for _ in range(3)]
        for instance_id in old:  # in flight on v1: waiting for `go`
            await until_status(store, instance_id, Status.WAITING, timeout=30)
        async with worker(database_url, "tests.versioned_v2") as v2_pid:
            await eventually(
                lambda: live_versions(both),
                lambda pairs: pairs == {("deploy_demo", "1"), ("deploy_demo", "2")},
                timeout=30,
            )
            new = [(await both.enqueue("deploy_demo")).instance_id for _ in range(3)]
            for instance_id in [*old, *new]:
                await until_status(store, instance_id, Status.WAITING, timeout=30)
                await both.signal(instance_id, "go")
            for instance_id in old:
                done = await until_status(store, instance_id, Status.COMPLETED, timeout=30)
                assert done.version == "1"
                assert done.result == {"started_on": "1", "finished_on": "1", "pid": v1_pid}
            for instance_id in new:
                done = await until_status(store, instance_id, Status.COMPLETED, timeout=30)
                assert done.version == "2"
                assert done.result == {"started_on": "2", "finished_on": "2", "pid": v2_pid}

    # Version 1's worker went away: a v1 instance waits, and says why.
    async with worker(database_url, "tests.versioned_v2"):
        await eventually(
            lambda: live_versions(both), lambda pairs: pairs == {("deploy_demo", "2")}, timeout=30
        )
        stranded = (await both.enqueue("deploy_demo", version="1")).instance_id
        reason = await both.waiting_reason(stranded)
        assert reason is not None
        assert reason.code == "VERSION_UNAVAILABLE"
        record = await store.get_instance(stranded)
        assert record is not None
        assert record.status == Status.PENDING
        async with worker(database_url, "tests.versioned_v1") as back_pid:
            await until_status(store, stranded, Status.WAITING, timeout=30)
            await both.signal(stranded, "go")
            done = await until_status(store, stranded, Status.COMPLETED, timeout=30)
            assert done.result == {"started_on": "1", "finished_on": "1", "pid": back_pid}
