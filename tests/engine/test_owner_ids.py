"""An engine refuses to start with an owner id another live process holds (presence.py's
check_owner), found by an outside audit: a second `laneway worker` with a live one's
LANEWAY_OWNER_ID shared its workers row. A restart of the same process identity, whose dead
predecessor's row still looks live, starts at once; so does one whose row aged out.
"""

import asyncio
import os
import socket
import subprocess
import sys

import asyncpg
import pytest

from laneway import OwnerIdInUseError
from laneway.engine.presence import held_by_another
from laneway.store import Store
from tests.engine.helpers import make_engine
from tests.workflows import noop

OWNER = "pod-0"


async def _row(store: Store, *, host: str, pid: int, heartbeat_seconds: float = 10.0) -> None:
    """A live row of OWNER, as a process of `host` and `pid` last wrote it."""
    await store.heartbeat_worker(
        owner_id=OWNER, role="worker", host=host, pid=pid, workflows=["noop"],
        versions=["noop@1"], running=0, concurrency=10, heartbeat_seconds=heartbeat_seconds,
    )  # fmt: skip


async def _starts(store: Store) -> None:
    """An engine with OWNER passes the check, runs, and its first beat takes the row over."""
    engine = make_engine(store, noop, owner_id=OWNER, lease_seconds=0.6)
    await engine.check_owner()
    async with engine.running():
        done = await engine.enqueue("noop")
        await engine.wait(done.instance_id, timeout=15)
        [row] = await store.live_workers()
    assert (row.owner_id, row.host, row.pid) == (OWNER, socket.gethostname(), os.getpid())


def _dead_pid() -> int:
    """The pid of a process of this host that has ended."""
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    return int(child.stdout)


async def test_an_engine_refuses_an_owner_id_a_live_process_of_another_host_holds(
    store: Store,
) -> None:
    await _row(store, host="other-host", pid=4242)
    engine = make_engine(store, noop, owner_id=OWNER, lease_seconds=0.6)
    with pytest.raises(OwnerIdInUseError) as refused:
        await engine.check_owner()
    message = str(refused.value)
    assert f"owner id {OWNER!r} is held by a live process (host other-host, pid 4242" in message
    assert "last seen 0." in message
    assert "give each process its own LANEWAY_OWNER_ID, or leave it unset" in message
    # Run embedded, the engine raises it as itself, and the block is cancelled.
    body_ended: list[bool] = []

    async def host_app() -> None:
        async with engine.running():
            await asyncio.sleep(10)
            body_ended.append(True)

    with pytest.raises(OwnerIdInUseError):
        await host_app()
    assert body_ended == []
    assert not engine.is_running
    # The holder's row is left as it was: not taken over, and not removed at the stop.
    [row] = await store.live_workers()
    assert (row.owner_id, row.host, row.pid) == (OWNER, "other-host", 4242)


async def test_an_engine_refuses_an_owner_id_another_live_process_of_this_host_holds(
    store: Store,
) -> None:
    await _row(store, host=socket.gethostname(), pid=os.getppid())  # alive, and not us
    engine = make_engine(store, noop, owner_id=OWNER)
    with pytest.raises(OwnerIdInUseError, match=f"pid {os.getppid()},"):
        await engine.check_owner()


async def test_an_engine_starts_when_its_owner_ids_row_is_of_a_dead_process_of_this_host(
    store: Store,
) -> None:
    # A systemd unit restarted with LANEWAY_OWNER_ID: its predecessor's row looks live still.
    await _row(store, host=socket.gethostname(), pid=_dead_pid())
    await _starts(store)


async def test_an_engine_starts_when_its_owner_ids_row_is_its_own_pid_on_this_host(
    store: Store,
) -> None:
    # A container restarted (pid 1 again), or an engine of this process that stopped without
    # removing its row: the same host and pid are this identity's restart.
    earlier = make_engine(store, noop, owner_id=OWNER)
    await earlier.claim_loop.presence.beat()
    await _starts(store)


async def test_an_engine_starts_when_its_owner_ids_row_aged_out(
    store: Store, admin: asyncpg.Connection
) -> None:
    await _row(store, host="other-host", pid=4242)
    # Two heartbeats missed: the process stopped (the next beat of any process deletes it).
    await admin.execute(
        "UPDATE laneway.workers SET last_seen_at = now() - interval '21 seconds'"
        " WHERE owner_id = $1",
        OWNER,
    )
    await _starts(store)


def test_whose_row_it_is_by_host_and_pid(monkeypatch: pytest.MonkeyPatch) -> None:
    here = socket.gethostname()
    assert held_by_another("other-host", os.getpid())
    assert not held_by_another(here, os.getpid())  # never signalled: it is us
    for exists, expected in [
        (None, True),
        (ProcessLookupError, False),
        (PermissionError, True),  # another user's process: it exists
    ]:

        def kill(pid: int, signal: int, raised: type[OSError] | None = exists) -> None:
            assert signal == 0
            if raised is not None:
                raise raised

        monkeypatch.setattr(os, "kill", kill)
        assert held_by_another(here, 4242) is expected
    assert not held_by_another(here, 0)  # no row's pid, and never a process group's signal
