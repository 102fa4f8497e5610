"""The embedded PostgreSQL is shared by every Laneway service and process that uses its folder.

Two services in one process (nested open_services(), two mounted apps) reach the same server
through one pgserver handle: it must keep running until the last of them has exited. Across
processes, a user killed outright must not keep the server running after the last live user
has stopped cleanly.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

import laneway
from laneway.config import Settings
from laneway.services import open_services
from laneway.store.databases import stop_leftover_postmaster
from tests.workflows import noop


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A folder for one embedded server; whatever still runs there is stopped afterwards."""
    # Not pytest's tmp_path: pytest prunes old ones while another run may still use them.
    folder = Path(tempfile.mkdtemp(prefix="laneway-embedded-test-"))
    try:
        yield folder
    finally:
        stop_leftover_postmaster(folder / "pg")
        shutil.rmtree(folder, ignore_errors=True)


async def test_the_embedded_server_outlives_an_inner_service_when_services_are_nested(
    data_dir: Path,
) -> None:
    settings = Settings(data_dir=data_dir, owner_id="outer")
    async with open_services(settings, workflows=[noop]) as outer:
        inner_settings = replace(settings, owner_id="inner")
        async with open_services(inner_settings, workflows=[noop]) as inner:
            await inner.engine.enqueue("noop")
        # The inner service has let go of the server; the outer one still uses it, and its
        # running engine releases its leases over it when it stops.
        enqueued = await outer.engine.enqueue("noop")
        async with outer.engine.running():
            record = await outer.engine.wait(enqueued.instance_id, timeout=30)
        assert record.status == "completed"
        assert (data_dir / "pg" / "postmaster.pid").exists()
    # The last user has exited: the server is stopped (pg_ctl stop removes its pid file).
    assert not (data_dir / "pg" / "postmaster.pid").exists()


# A process that uses the embedded server in a folder until its stdin closes, then lets go.
_USER = """
import sys
from pathlib import Path
from laneway.store.embedded import embedded_postgres

data_dir = Path(sys.argv[1])
with embedded_postgres(data_dir):
    (data_dir / f"ready-{sys.argv[2]}").touch()
    sys.stdin.read()
"""


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def start_user(data_dir: Path) -> Iterator[Callable[[str], subprocess.Popen[str]]]:
    """Starts a process that uses the embedded server; any still running are killed after."""
    repo = str(Path(laneway.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")])}
    started: list[subprocess.Popen[str]] = []

    def start(name: str) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, "-c", _USER, str(data_dir), name],
            stdin=subprocess.PIPE,
            env=env,
            text=True,
        )
        started.append(process)
        ready = data_dir / f"ready-{name}"
        _wait_for(lambda: ready.exists() or process.poll() is not None, f"{name} to start")
        assert process.poll() is None, f"{name} exited with {process.returncode}"
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()
        if process.stdin is not None:
            process.stdin.close()


def _kill(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait()  # reaped, so its pid no longer exists
    assert process.stdin is not None
    process.stdin.close()


def _stop(process: subprocess.Popen[str]) -> None:
    assert process.stdin is not None
    process.stdin.close()
    assert process.wait(timeout=60) == 0


def _server_pid(data_dir: Path) -> int:
    return int((data_dir / "pg" / "postmaster.pid").read_text().split()[0])


def _server_stopped(data_dir: Path, pid: int) -> bool:
    if (data_dir / "pg" / "postmaster.pid").exists():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _listed(data_dir: Path) -> list[int]:
    users: list[int] = json.loads((data_dir / "pg" / ".handle_pids.json").read_text())
    return users


def test_the_last_clean_stop_stops_the_server_after_a_user_was_killed(
    data_dir: Path, start_user: Callable[[str], subprocess.Popen[str]]
) -> None:
    killed = start_user("killed")
    _kill(killed)
    # pgserver never learns of the kill: the server runs on and still lists the dead process.
    pid = _server_pid(data_dir)
    assert _listed(data_dir) == [killed.pid]

    last = start_user("last")
    assert _server_pid(data_dir) == pid  # reuses the server the killed process left
    assert _listed(data_dir) == [last.pid]
    _stop(last)
    _wait_for(lambda: _server_stopped(data_dir, pid), "the server to stop")


def test_a_clean_stop_keeps_the_server_for_a_live_user_and_forgets_a_killed_one(
    data_dir: Path, start_user: Callable[[str], subprocess.Popen[str]]
) -> None:
    first = start_user("first")
    pid = _server_pid(data_dir)
    killed = start_user("killed")
    last = start_user("last")
    _kill(killed)

    _stop(first)
    # The last user still uses the server; the killed one no longer counts.
    assert _server_pid(data_dir) == pid
    assert _listed(data_dir) == [last.pid]
    _stop(last)
    _wait_for(lambda: _server_stopped(data_dir, pid), "the server to stop")
