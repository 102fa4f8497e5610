"""Worker processes for chaos tests, a supervisor that restarts them, and the fault journal.

Owns `python -m laneway worker` subprocesses: each runs with its own owner id (so its connections
are `laneway-worker-<owner>` in pg_stat_activity and in the audit), logs to its own file, and
is replaced by a fresh process with a new owner id whenever it dies. Every signal the
supervisor sends and every exit it sees is written to the journal with a timestamp, which the
checker reads as the list of faults that explain duplicate executions.
"""

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from tests.chaos.checker import Incident
from tests.chaos.ledger import Conn

REPO = Path(__file__).resolve().parents[2]
STOP_TIMEOUT_SECONDS = 20.0


async def start_worker(
    env: Mapping[str, str], log_path: Path | None = None
) -> asyncio.subprocess.Process:
    """Start `python -m laneway worker` with exactly `env` over this process's environment."""
    output = log_path.open("ab") if log_path is not None else asyncio.subprocess.DEVNULL
    try:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "laneway",
            "worker",
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO), **env},
            stdout=output,
            stderr=asyncio.subprocess.STDOUT if log_path is not None else output,
        )
    finally:
        if not isinstance(output, int):
            output.close()


async def stop_worker(process: asyncio.subprocess.Process, timeout: float) -> int:
    """SIGTERM (after SIGCONT, in case it is stopped); SIGKILL if it outlives `timeout`."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGCONT)
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), timeout=timeout)
        except TimeoutError:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode


@dataclass(eq=False, kw_only=True)
class Worker:
    """One process in a slot; the slot keeps its environment across restarts."""

    slot: int
    owner_id: str
    process: asyncio.subprocess.Process
    log_path: Path
    expected_exit: bool = False

    def log_messages(self) -> list[dict[str, object]]:
        """The worker's JSON log lines (non-JSON lines, e.g. a traceback, are skipped)."""
        entries = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if isinstance(entry, dict):
                    entries.append(entry)
        return entries


@dataclass(eq=False, kw_only=True)
class Supervisor:
    """Keeps one worker per slot running; records what happened to each owner."""

    env: Mapping[str, str]
    log_dir: Path
    slot_env: Mapping[int, Mapping[str, str]] = field(default_factory=dict)
    prefix: str = "w"
    restart: bool = True
    journal: list[Incident] = field(default_factory=list)
    workers: dict[int, Worker] = field(default_factory=dict)
    retired: list[Worker] = field(default_factory=list)
    _generations: dict[int, int] = field(default_factory=dict)
    _group: asyncio.TaskGroup | None = None

    def record(self, owner_id: str, kind: str) -> Incident:
        incident = Incident(owner_id=owner_id, kind=kind, at=datetime.now(UTC))
        self.journal.append(incident)
        return incident

    def owners(self) -> list[str]:
        return [worker.owner_id for worker in self.workers.values()]

    def by_owner(self, owner_id: str) -> Worker:
        for worker in [*self.workers.values(), *self.retired]:
            if worker.owner_id == owner_id:
                return worker
        raise KeyError(owner_id)

    def incidents(self, kind: str) -> list[Incident]:
        return [i for i in self.journal if i.kind == kind]

    async def spawn(self, slot: int) -> Worker:
        """Start the next generation of `slot` with a new owner id."""
        generation = self._generations.get(slot, -1) + 1
        self._generations[slot] = generation
        owner_id = f"{self.prefix}{slot}g{generation}"
        env = {**self.env, **self.slot_env.get(slot, {}), "LANEWAY_OWNER_ID": owner_id}
        log_path = self.log_dir / f"{owner_id}.log"
        process = await start_worker(env, log_path)
        worker = Worker(slot=slot, owner_id=owner_id, process=process, log_path=log_path)
        self.workers[slot] = worker
        self.record(owner_id, "start")
        if env.get("LANEWAY_FAULTS"):
            self.record(owner_id, "armed")
        assert self._group is not None, "use `async with supervise(...)`"
        self._group.create_task(self._watch(worker), name=f"chaos-watch-{owner_id}")
        return worker

    async def _watch(self, worker: Worker) -> None:
        await worker.process.wait()
        self.record(worker.owner_id, "exit" if worker.expected_exit else "died")
        if self.workers.get(worker.slot) is worker:
            del self.workers[worker.slot]
            self.retired.append(worker)
            if self.restart:
                await self.spawn(worker.slot)

    async def kill(self, slot: int) -> Worker:
        """SIGKILL the worker in `slot` and wait for it; its replacement starts at once."""
        worker = self.workers[slot]
        worker.expected_exit = True
        self.record(worker.owner_id, "kill")
        worker.process.kill()
        await worker.process.wait()
        return worker

    def stop(self, slot: int) -> Worker:
        """SIGSTOP: the process freezes with its sockets and transactions open."""
        worker = self.workers[slot]
        self.record(worker.owner_id, "stop")
        worker.process.send_signal(signal.SIGSTOP)
        return worker

    def cont(self, slot: int) -> Worker:
        worker = self.workers[slot]
        self.record(worker.owner_id, "cont")
        worker.process.send_signal(signal.SIGCONT)
        return worker

    async def terminate(self, slot: int, timeout: float = STOP_TIMEOUT_SECONDS) -> int:
        """SIGTERM the worker in `slot` (graceful shutdown); its exit code."""
        worker = self.workers[slot]
        worker.expected_exit = True
        self.record(worker.owner_id, "term")
        return await stop_worker(worker.process, timeout)

    async def wait_ready(self, conn: Conn, timeout: float = 60.0) -> None:
        """Wait until every current worker has a pooled connection open (it is claiming)."""
        async with asyncio.timeout(timeout):
            while True:
                wanted = {f"laneway-worker-{owner}" for owner in self.owners()}
                rows = await conn.fetch(
                    "SELECT DISTINCT application_name FROM pg_stat_activity"
                    " WHERE application_name = ANY($1::text[])",
                    list(wanted),
                )
                if len(rows) == len(wanted):
                    return
                await asyncio.sleep(0.05)

    async def close(self) -> None:
        self.restart = False
        workers = list(self.workers.values())
        for worker in workers:
            worker.expected_exit = True
        await asyncio.gather(*(stop_worker(w.process, STOP_TIMEOUT_SECONDS) for w in workers))


@contextlib.asynccontextmanager
async def supervise(
    env: Mapping[str, str],
    log_dir: Path,
    *,
    workers: int,
    slot_env: Mapping[int, Mapping[str, str]] | None = None,
    prefix: str = "w",
) -> AsyncIterator[Supervisor]:
    """Start `workers` supervised workers; on exit, stop them all (SIGTERM, then SIGKILL)."""
    await asyncio.to_thread(log_dir.mkdir, parents=True, exist_ok=True)
    supervisor = Supervisor(env=env, log_dir=log_dir, slot_env=slot_env or {}, prefix=prefix)
    async with asyncio.TaskGroup() as group:
        supervisor._group = group
        try:
            for slot in range(workers):
                await supervisor.spawn(slot)
            yield supervisor
        finally:
            await supervisor.close()
