"""A second stop signal cuts a process's drain short: `laneway worker` and `laneway serve`.

The first SIGINT or SIGTERM stops claiming and lets steps in flight finish within
LANEWAY_SHUTDOWN_GRACE; a second hands them back at once (an operator who cannot wait), and
the process still exits 0 with the instance released for another process to resume.
"""

import asyncio
import json
import signal
import sys
from uuid import UUID

import pytest

from laneway.model import Status
from laneway.store import Store
from tests.engine.helpers import until_status
from tests.test_cli import ROOT, environment, laneway

LONG_GRACE = "300"  # far longer than the test waits: only the second signal ends the drain


async def _enqueue_a_long_step(env: dict[str, str]) -> UUID:
    code, out, err = await laneway("enqueue", "slow", "--params", '{"seconds": 600}', env=env)
    assert code == 0, err
    return UUID(json.loads(out)["instanceID"])


async def until_logged(process: asyncio.subprocess.Process, message: str) -> None:
    assert process.stderr is not None
    while True:
        line = await process.stderr.readline()
        assert line, f"the process ended before it logged {message!r}"
        if line.startswith(b"{") and json.loads(line).get("message") == message:
            return


@pytest.mark.parametrize(
    ("command", "second"),
    [
        (("worker",), signal.SIGTERM),
        (("serve", "--port", "0"), signal.SIGINT),
        (("serve", "--port", "0"), signal.SIGTERM),
    ],
)
async def test_a_second_stop_signal_hands_steps_in_flight_back_at_once(
    database_url: str, store: Store, command: tuple[str, ...], second: signal.Signals
) -> None:
    env = environment(
        database_url, LANEWAY_WORKFLOWS="tests.workflows", LANEWAY_SHUTDOWN_GRACE=LONG_GRACE
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "laneway", *command, cwd=ROOT, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        instance_id = await _enqueue_a_long_step(env)
        await until_status(store, instance_id, Status.RUNNING, timeout=60)
        async with asyncio.timeout(60):
            process.send_signal(signal.SIGTERM)
            await until_logged(process, "draining")
            process.send_signal(second)
            await until_logged(process, "stopping without waiting for the steps in flight")
            await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0
    record = await store.get_instance(instance_id)
    assert record is not None
    assert record.status == Status.PENDING  # handed back: another process resumes it now
    assert record.owner_id is None
