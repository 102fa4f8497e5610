"""What every contestant runner shares: its command line, its JSON answer, its clocks.

A runner is one small script per system (laneway_runner.py, pgqueuer_runner.py, ...) that
bench/compare.py starts once per phase, as a fresh process, with the interpreter of the
venv that has that system installed (the project's .venv for Laneway, bench/.venv for the
peers). It does one phase against one database and prints exactly one JSON object on its
last stdout line; logs go to stderr. With --setup it installs the schema first, before any
clock starts (one process start less per database). Phases and answers:

  setup          install the system's schema (and queue) in the fresh database  {}
  enqueue-one    enqueue --count no-op jobs, one call each       {"seconds"}
  enqueue-batch  enqueue --count no-op jobs, batch API, 1000 a call  {"seconds"}
  enqueue-graphql  Laneway only: the same over HTTP, `enqueueWorkflows` of 1000 a call
                 {"seconds"}, or {"missing": why} when the service has no such mutation
  process        run a worker until --count jobs are completed  {"seconds", "monitor_transactions"}
  latency        --samples single enqueues into an idle worker  {"ms": [...], "busy"}

How the runners measure, the same way for every system:

* enqueue: perf_counter from just before the first call to just after the last returns
  (connections are opened before the clock starts).
* process: from the first handler invocation (its perf_counter, in the worker process) to
  the moment the runner's completion monitor first sees all --count jobs durably completed
  in the database. The monitor stays off the database while jobs run: it waits until the
  last handler of every job has returned (an in-process counter), then runs one
  `SELECT count(*)` in autocommit on its own connection every --poll-ms until the count is
  reached. `monitor_transactions` is how many statements it ran, so the harness can
  subtract them from the pg_stat_database commit count.
* latency: the enqueue comes from a client object of its own (its own connections; not the
  worker's in-process wake-up), in the worker's process so both ends share one clock:
  perf_counter just before the enqueue call to perf_counter at the first line of the
  handler (the first step). One warm-up job first, not counted; then the jobs arrive one
  at a time on a fixed, seeded schedule (--spacing-ms apart, jittered ±50 %): far enough
  apart that a push-based worker is idle at each arrival, and independent of completions
  so that arrivals land at random points of a polling worker's cycle (a closed loop of
  "enqueue once the last one completed" stays in phase with a poller and always waits a
  full interval). `busy` counts arrivals that found an earlier job still unfinished.

Only the standard library and asyncpg are imported here (both venvs have asyncpg).
"""

import argparse
import asyncio
import json
import random
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine

import asyncpg

LATENCY_SEED = 6
PHASES = ("setup", "enqueue-one", "enqueue-batch", "enqueue-graphql", "process", "latency")
BATCH_SIZE = 1000
"""Jobs per batch-API call in enqueue-batch, for every system that has one."""


def parse(argv: list[str], variants: tuple[str, ...]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("phase", choices=PHASES)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--variant", choices=variants, default=variants[0])
    parser.add_argument(
        "--setup", action="store_true", help="install the schema first (untimed), as `setup`"
    )
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--spacing-ms", type=float, default=50.0)
    parser.add_argument("--poll-ms", type=float, default=5.0)
    parser.add_argument("--deadline", type=float, default=600.0, help="seconds for the phase")
    return parser.parse_args(argv)


def main(
    run: Callable[[argparse.Namespace], Coroutine[object, object, dict[str, object]]],
    variants: tuple[str, ...],
    *,
    use_uvloop: bool,
) -> int:
    """Parse the command line, run the phase, print its answer; the exit code.

    `use_uvloop`: run on uvloop, as the system's own worker command does (`laneway worker`
    and PgQueuer's `pgq run` do when uvloop is installed; Procrastinate's CLI and DBOS's
    own loop use asyncio's).
    """
    args = parse(sys.argv[1:], variants)
    if use_uvloop:
        import uvloop

        result = uvloop.run(run(args))
    else:
        result = asyncio.run(run(args))
    answer(result)
    return 0


def answer(result: dict[str, object]) -> None:
    """Print the phase's result as the last stdout line."""
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def log(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


class Starts:
    """When handlers started (the first one of all, and the ones a latency sample awaits),
    and how many jobs ran their last handler.

    `mark` and `finish` may be called from any thread (DBOS runs workflows in threads or on
    a loop of its own); waiters are asyncio futures resolved on their own loop.
    """

    def __init__(self) -> None:
        self.first: float | None = None
        self.finished = 0
        self._lock = threading.Lock()
        self._waiting: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[float]]] = {}
        self._finishing: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[float]]] = []

    def finish(self) -> None:
        """Called at the end of a job's last handler (before its completion is committed)."""
        now = time.perf_counter()
        with self._lock:
            self.finished += 1
            reached = [w for w in self._finishing if w[0] <= self.finished]
            self._finishing = [w for w in self._finishing if w[0] > self.finished]
        for _, loop, future in reached:
            loop.call_soon_threadsafe(_resolve, future, now)

    async def wait_finished(self, expected: int) -> None:
        """Until `expected` jobs ran their last handler; in-process, no database query."""
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        with self._lock:
            if self.finished >= expected:
                return
            self._finishing.append((expected, asyncio.get_running_loop(), future))
        await future

    def mark(self, key: int) -> None:
        now = time.perf_counter()
        with self._lock:
            if self.first is None:
                self.first = now
            waiter = self._waiting.pop(key, None)
        if waiter is not None:
            loop, future = waiter
            loop.call_soon_threadsafe(_resolve, future, now)

    def expect(self, key: int) -> asyncio.Future[float]:
        """A future for the start time of job `key`; call before enqueueing it."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[float] = loop.create_future()
        with self._lock:
            self._waiting[key] = (loop, future)
        return future


def _resolve(future: asyncio.Future[float], value: float) -> None:
    if not future.done():
        future.set_result(value)


class Monitor:
    """Counts completed jobs with one autocommit statement per poll, on its own connection."""

    def __init__(self, conn: asyncpg.Connection, count_sql: str) -> None:
        self._conn = conn
        self._sql = count_sql
        self.transactions = 0

    @classmethod
    async def open(cls, database_url: str, count_sql: str) -> "Monitor":
        return cls(await asyncpg.connect(database_url), count_sql)

    async def close(self) -> None:
        await self._conn.close()

    async def completed(self) -> int:
        self.transactions += 1
        return int(await self._conn.fetchval(self._sql))

    async def wait_for(self, expected: int, *, poll_seconds: float, deadline: float) -> float:
        """perf_counter when `expected` jobs were first seen completed.

        Raises:
            TimeoutError: not reached within `deadline` seconds.
        """
        async with asyncio.timeout(deadline):
            while True:
                if await self.completed() >= expected:
                    return time.perf_counter()
                await asyncio.sleep(poll_seconds)


async def timed_loop(count: int, call: Callable[[int], Awaitable[object]]) -> float:
    """Seconds to await `call(i)` for i in range(count), one after the other."""
    started = time.perf_counter()
    for i in range(count):
        await call(i)
    return time.perf_counter() - started


async def timed_batches(
    count: int, call: Callable[[range], Awaitable[object]], size: int = BATCH_SIZE
) -> float:
    """Seconds to await `call(ids)` for consecutive ranges of at most `size` ids."""
    started = time.perf_counter()
    for offset in range(0, count, size):
        await call(range(offset, min(offset + size, count)))
    return time.perf_counter() - started


async def process_phase(
    args: argparse.Namespace, starts: Starts, monitor: Monitor
) -> dict[str, object]:
    """Wait (the worker already running) for all jobs; the span from the first start."""
    async with asyncio.timeout(args.deadline):
        await starts.wait_finished(args.count)
    done = await monitor.wait_for(args.count, poll_seconds=args.poll_ms / 1000, deadline=60)
    if starts.first is None:
        raise RuntimeError("jobs completed but no handler was seen starting")
    return {"seconds": done - starts.first, "monitor_transactions": monitor.transactions}


async def latency_phase(
    args: argparse.Namespace,
    starts: Starts,
    monitor: Monitor,
    enqueue: Callable[[int], Awaitable[object]],
) -> dict[str, object]:
    """One warm-up job, then --samples single enqueues at jittered --spacing-ms intervals.

    Arrivals follow a fixed schedule (the same for every system: seeded jitter of ±50 %),
    not the previous job's completion, so they fall at random points of a polling worker's
    cycle. `busy` counts arrivals that found an earlier job not yet finished by its handler.
    """
    poll = args.poll_ms / 1000
    rng = random.Random(LATENCY_SEED)
    async with asyncio.timeout(args.deadline):
        warm_up = starts.expect(0)
        await enqueue(0)
        await warm_up
        await starts.wait_finished(1)
        await monitor.wait_for(1, poll_seconds=poll, deadline=60)
        sent: list[tuple[float, asyncio.Future[float]]] = []
        busy = 0
        due = time.perf_counter()
        for key in range(1, args.samples + 1):
            due += rng.uniform(0.5, 1.5) * args.spacing_ms / 1000
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            busy += starts.finished < key
            started = starts.expect(key)
            sent.append((time.perf_counter(), started))
            await enqueue(key)
        began = [await started for _, started in sent]
        await starts.wait_finished(args.samples + 1)
        await monitor.wait_for(args.samples + 1, poll_seconds=poll, deadline=60)
    samples = [(start - at) * 1000 for (at, _), start in zip(sent, began, strict=True)]
    return {"ms": samples, "busy": busy}
