"""Starts and stops the embedded PostgreSQL (the `pgserver` package) kept in a data folder.

Owns the embedded server's lifetime. Used when no DATABASE_URL is set, so `make run` and
`make test` need nothing installed by hand. pgserver counts the processes that use a folder's
server; this module counts the users within this process (several services, nested or
mounted side by side, share one pgserver handle per folder).

pgserver lists the processes that use a folder's server in `.handle_pids.json` and stops the
server only when the last of them lets go cleanly; a process killed outright (kill -9) stays
listed forever, so the server would never stop again. This module drops listed processes
that no longer exist, under pgserver's own lock, before it joins and before it lets go.
"""

import contextlib
import logging
import os
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pgserver.postgres_server import PostgresServer

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _Handle:
    server: "PostgresServer"
    users: int = 0


# Process-wide on purpose, like the pgserver handle it counts for: one server per data folder,
# however many services in this process use it. The lock covers start-up too, so a second
# user waits for the server the first one is starting instead of starting another.
_handles: dict[Path, _Handle] = {}
_handles_lock = threading.Lock()


@contextlib.contextmanager
def embedded_postgres(data_dir: Path, *, stop_on_exit: bool = True) -> Iterator[str]:
    """Start (or reuse) the PostgreSQL whose data lives in `data_dir/pg`; yield its URL.

    The server listens on a unix socket only. With `stop_on_exit`, it stops when the last
    user lets go of it: the last one in this process, and then only if no other process uses
    it. If any user asks to keep it (`stop_on_exit=False`), it is kept.
    """
    pgdata = (data_dir / "pg").resolve()
    with _handles_lock:
        handle = _handles.get(pgdata)
        if handle is None:
            handle = _handles[pgdata] = _Handle(_start(pgdata, stop_on_exit=stop_on_exit))
        elif not stop_on_exit:
            handle.server.cleanup_mode = None
        handle.users += 1
        url = str(handle.server.get_uri())
    logger.info("embedded postgres ready", extra={"pgdata": str(pgdata)})
    try:
        yield url
    finally:
        with _handles_lock:
            handle.users -= 1
            if handle.users == 0:
                del _handles[pgdata]
                _forget_dead_processes(pgdata)
                # Lets go of this process's handle; stops the server unless another process
                # still uses it or a user asked to keep it (cleanup_mode None).
                handle.server.cleanup()


def _start(pgdata: Path, *, stop_on_exit: bool) -> "PostgresServer":
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    # pgserver's platformdirs warns when XDG_RUNTIME_DIR is unset; that is harmless here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pgserver.postgres_server import get_server

        _forget_dead_processes(pgdata)
        return get_server(pgdata, cleanup_mode="stop" if stop_on_exit else None)


def _forget_dead_processes(pgdata: Path) -> None:
    """Drop the processes that no longer exist from pgserver's list of the server's users.

    pgserver stops the server only when its list holds exactly the process letting go, and
    only a clean exit takes a process off it. Held under pgserver's inter-process lock, the
    one it holds while it adds and removes processes and decides to stop, so a live process
    sharing the server is never dropped and never sees a half-written list.
    """
    from pgserver.postgres_server import PostgresServer
    from pgserver.utils import DiskList

    with PostgresServer._lock:
        users = DiskList(pgdata / ".handle_pids.json")
        listed = users.get()
        alive = [pid for pid in listed if _exists(pid)]
        if alive != listed:
            gone = sorted(set(listed) - set(alive))
            logger.info("embedded postgres users gone", extra={"pgdata": str(pgdata), "pids": gone})
            users.put(alive)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only checks that the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    return True
