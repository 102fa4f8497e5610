"""Several processes on one database: kill -9 mid-step, poison instances, remote cancel, wake-up.

Workers are real `python -m laneway worker` subprocesses with their own owner ids (issue #2,
points 5, 6, 7 and 10).
"""

import asyncio
import signal
from pathlib import Path
from uuid import UUID

import pytest

from laneway.config import Settings
from laneway.model import EventType, Status
from laneway.services import open_services
from laneway.store import Store
from tests.e2e.workers import worker_process
from tests.engine.helpers import eventually, make_engine, types_of
from tests.workflows import noop, poison, slow, two_steps

pytestmark = pytest.mark.e2e


def _ledger_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def _lines(path: Path) -> list[str]:
    return _ledger_lines(path)


async def _status(store: Store, instance_id: UUID) -> Status | None:
    record = await store.get_instance(instance_id)
    return record.status if record else None


async def test_instance_resumes_from_checkpoint_when_its_worker_is_killed(
    store: Store, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = tmp_path / "ledger.txt"
    monkeypatch.setenv("LANEWAY_TEST_LEDGER", str(ledger))
    engine = make_engine(store, two_steps, lease_seconds=1.0, poll_interval_seconds=0.1)
    enqueued = await engine.enqueue("two_steps", {"n": 1})
    async with worker_process(
        database_url,
        "doomed",
        {"LANEWAY_TEST_HOLD_SECOND": "3600", "LANEWAY_TEST_LEDGER": str(ledger)},
    ) as doomed:
        await eventually(lambda: _lines(ledger), lambda lines: len(lines) == 2, timeout=30)
        doomed.send_signal(signal.SIGKILL)
        await doomed.wait()
    async with engine.running():
        done = await engine.wait(enqueued.instance_id, timeout=30)
    assert done.status == Status.COMPLETED
    assert done.result == {"steps": 2, "params": {"from": "first"}}
    lines = _ledger_lines(ledger)
    # The first action ran once (checkpointed); the second ran again after the crash.
    assert [line.split()[1] for line in lines] == ["first", "second", "second"]
    types = await types_of(store, enqueued.instance_id)
    assert types.count(EventType.COMPLETED) == 1
    assert types.count(EventType.CHECKPOINT) == 1
    assert types.count(EventType.STARTED) == 2


async def test_poison_instance_ends_failed_instead_of_looping(
    store: Store, database_url: str
) -> None:
    engine = make_engine(store, poison)
    enqueued = await engine.enqueue("poison")
    env = {"LANEWAY_TEST_POISON": "1"}
    for round_number in range(6):
        async with worker_process(database_url, f"victim-{round_number}", env) as worker:
            # Each worker recovers the previous lease once it expires, then claims and dies,
            # or, once attempts are exhausted, records the failure and idles.
            async with asyncio.timeout(30):
                while worker.returncode is None:
                    if await _status(store, enqueued.instance_id) == Status.FAILED:
                        break
                    await asyncio.sleep(0.05)
        if await _status(store, enqueued.instance_id) == Status.FAILED:
            break
    failed = await store.get_instance(enqueued.instance_id)
    assert failed is not None
    assert failed.status == Status.FAILED
    assert failed.attempts == 2
    assert failed.last_error is not None
    assert failed.last_error.startswith("WorkerLost: lease expired")
    types = await types_of(store, enqueued.instance_id)
    assert types.count(EventType.FAILED) == 1
    assert types.count(EventType.STARTED) == 2


async def test_cancel_from_another_process_stops_the_handler_and_frees_the_slot(
    store: Store, database_url: str
) -> None:
    engine = make_engine(store, slow, noop)
    env = {"LANEWAY_WORKER_CONCURRENCY": "1", "LANEWAY_LEASE_SECONDS": "60"}
    async with worker_process(database_url, "remote", env):
        stuck = await engine.enqueue("slow", {"seconds": 3600})
        await eventually(
            lambda: _status(store, stuck.instance_id), lambda s: s == Status.RUNNING, timeout=30
        )
        follower = await engine.enqueue("noop")
        await engine.cancel(stuck.instance_id)
        # The worker runs one instance at a time and its lease is a minute long: the follower
        # can only start this soon if the cancelled handler was stopped and its slot freed.
        await eventually(
            lambda: _status(store, follower.instance_id),
            lambda s: s == Status.COMPLETED,
            timeout=15,
        )
    types = await types_of(store, stuck.instance_id)
    assert types[-1] == EventType.CANCELLED
    assert EventType.COMPLETED not in types


async def test_enqueue_from_another_process_wakes_an_idle_engine(database_url: str) -> None:
    settings = Settings(database_url=database_url, poll_interval_seconds=60.0)
    async with (
        open_services(settings, workflows=[noop]) as idle,
        open_services(settings, workflows=[noop]) as producer,
        idle.engine.running(),
    ):
        for _ in range(3):
            enqueued = await producer.engine.enqueue("noop")  # its own loop is not running
            # The idle engine polls once a minute; only the NOTIFY can start this in time.
            done = await idle.engine.wait(enqueued.instance_id, timeout=5)
            assert done.status == Status.COMPLETED


async def test_sigterm_hands_unfinished_instances_back_at_once(
    store: Store, database_url: str
) -> None:
    engine = make_engine(store, slow)
    env = {"LANEWAY_LEASE_SECONDS": "60", "LANEWAY_SHUTDOWN_GRACE": "0.5"}
    async with worker_process(database_url, "leaving", env) as leaving:
        stuck = await engine.enqueue("slow", {"seconds": 3600})
        await eventually(
            lambda: _status(store, stuck.instance_id), lambda s: s == Status.RUNNING, timeout=30
        )
        leaving.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(leaving.wait(), timeout=15) == 0
    # Back to pending now, not after the minute-long lease; the attempt is off no budget.
    released = await store.get_instance(stuck.instance_id)
    assert released is not None
    assert released.status == Status.PENDING
    assert released.attempts == 1  # the count goes on
    assert released.step_attempt == 0  # and the interrupted attempt is given back
    assert released.owner_id is None
    events = await store.instance_events_after(stuck.instance_id, 0, 10)
    assert events[-1].type == EventType.RETRYING
    assert events[-1].error == "released: worker shutting down"
