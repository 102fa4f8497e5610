"""`laneway signal` and `laneway resume --input` as a user runs them: subprocesses against the
per-test database, with an engine running the examples in this process.

Exit codes: 0 ok, 1 unknown or in the wrong status, 2 bad input (the instance unchanged).
"""

import asyncio
import json
import signal
import sys
from uuid import UUID

from app.examples import approval, review
from laneway.model import Status
from laneway.store import Store
from tests.engine.helpers import make_engine, until_status
from tests.test_cli import ROOT, environment, laneway


async def test_signal_wakes_a_wait_and_refuses_what_it_must(
    database_url: str, store: Store
) -> None:
    env = environment(database_url)
    engine = make_engine(store, approval, poll_interval_seconds=0.05)
    enqueued = await engine.enqueue("approval", {"timeoutSeconds": 600})
    instance_id = str(enqueued.instance_id)
    async with engine.running():
        await until_status(store, enqueued.instance_id, Status.WAITING, timeout=30)
        code, _, err = await laneway("signal", instance_id, "approve", "--payload", "{x}", env=env)
        assert code == 2
        assert "argument --payload: not valid JSON" in err
        code, out, err = await laneway(
            "signal", instance_id, "approve", "--payload", '{"by": "cli"}',
            "--idempotency-key", "once", env=env,
        )  # fmt: skip
        assert code == 0, err
        sent = json.loads(out)
        assert sent["accepted"] is True
        assert sent["status"] == "pending"
        code, out, _ = await laneway(
            "signal", instance_id, "approve", "--idempotency-key", "once", env=env
        )
        assert code == 0
        assert json.loads(out)["signalID"] == sent["signalID"]
        assert json.loads(out)["accepted"] is False
        done = await until_status(store, enqueued.instance_id, Status.COMPLETED, timeout=30)
    assert done.result == {"approved": True, "payload": {"by": "cli"}}
    code, _, err = await laneway("signal", instance_id, "approve", env=env)
    assert code == 1
    assert "while it is completed" in err
    code, _, err = await laneway("signal", "00000000-0000-4000-8000-000000000000", "x", env=env)
    assert code == 1
    assert "no instance" in err
    code, _, err = await laneway("signal", "not-an-id", "approve", env=env)
    assert code == 2


async def test_resume_with_input_is_checked_by_the_schema(database_url: str, store: Store) -> None:
    env = environment(database_url)
    engine = make_engine(store, review, poll_interval_seconds=0.05)
    enqueued = await engine.enqueue("review")
    instance_id = str(enqueued.instance_id)
    async with engine.running():
        await until_status(store, enqueued.instance_id, Status.PAUSED, timeout=30)
        code, _, err = await laneway("resume", instance_id, "--input", '{"decision": "?"}', env=env)
        assert code == 2
        assert "$.decision" in err
        still = await store.get_instance(enqueued.instance_id)
        assert still is not None
        assert still.status == Status.PAUSED
        code, out, err = await laneway(
            "resume", instance_id, "--input", '{"decision": "approve", "comment": "cli"}', env=env
        )
        assert code == 0, err
        assert json.loads(out) == {"instanceID": instance_id, "status": "pending"}
        done = await until_status(store, enqueued.instance_id, Status.COMPLETED, timeout=30)
    assert done.result == {"decision": "approve", "comment": "cli"}
    code, _, err = await laneway("resume", instance_id, env=env)
    assert code == 1
    assert "while it is completed" in err


async def _start_worker(env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "laneway", "worker", cwd=ROOT, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip


async def test_a_sleep_survives_kill_9_and_wakes_on_time_in_another_process(
    database_url: str, store: Store
) -> None:
    env = environment(database_url)
    first = await _start_worker(env)
    second = None
    try:
        code, out, err = await laneway("enqueue", "nap", "--params", '{"seconds": 3}', env=env)
        assert code == 0, err
        instance_id = UUID(json.loads(out)["instanceID"])
        asleep = await until_status(store, instance_id, Status.WAITING, timeout=30)
        assert asleep.owner_id is None  # nothing of the first process is needed to wake it
        assert asleep.wake_at is not None
        first.kill()  # SIGKILL: no drain, no hand-back, no goodbye
        await first.wait()
        second = await _start_worker(env)
        done = await until_status(store, instance_id, Status.COMPLETED, timeout=30)
        assert done.result == {"slept": 3}
        async with store.connection() as conn:
            woke = await conn.fetchval(
                "SELECT at FROM laneway.events WHERE instance_id = $1 AND type = 'resumed'",
                instance_id,
            )
            started = await conn.fetchval(
                "SELECT max(started_at) FROM laneway.workers"  # the second process's row
            )
        assert woke >= asleep.wake_at  # never early, on the database clock
        # On time: within a second of its wake time, or of the second process's start if
        # that came later (it knows the wake time from its first poll).
        assert (woke - max(asleep.wake_at, started)).total_seconds() < 1.0
    finally:
        for process in (first, second):
            if process is not None and process.returncode is None:
                process.send_signal(signal.SIGTERM)
                async with asyncio.timeout(30):
                    await process.wait()
