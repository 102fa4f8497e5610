"""Wake-up benchmark: how late sleeping instances run, and what waiting rows cost the claim.

Run with `.venv/bin/python bench/wakeups.py [--markdown]`. It uses DATABASE_URL when set, else
a throwaway embedded PostgreSQL with its default (durable) settings, and a fresh database per
case. Not part of `make test`.

Part 1, wake-up lag. `--instances` (10,000) instances of a workflow whose first handler
returns `Sleep` and whose `then` handler returns `Done`. Each instance's params carry an
absolute wake time, `--base` (5) seconds after the enqueue began plus i/N of one second, and
the handler sleeps until then: the wake times are spread uniformly over one second whatever
order the first handlers ran in (a relative sleep of base + i/N would add the first handlers'
own spread). Every instance must be asleep before the first wake time (the last `waiting`
event before the earliest wake time), else the run is an error, not a figure. The engines
run with their defaults (concurrency 100, poll interval 2 s), so only the next wake time each
knows of can wake them on time. Cases: one engine; two engines in this process (each with its
own pool and LISTEN connection, sharing one event loop); two engines as two child processes
(this script with --engine-child). The enqueue is from this process's own store, no engine
running there. After all completed, SQL reads, per instance, its wake time (`run_after`, set
to the wake time by the wake-up), its `resumed` event and the first `started` event after
it, all on the database clock: the lag is started minus wake time.

Part 2, waiting rows. Per database, `--waiting` (100,000) waiting instances or none, seeded
by INSERT ... SELECT generate_series in the claimed workflow's own queue: half sleeps, a
quarter signal waits with a timeout, a quarter signal waits without one (wake_at NULL), every
wake an hour away; then a backlog of 1,000 pending instances, VACUUM ANALYZE. Timed, taking
turns: `store.claim` (limit 10; the claimed rows then completed and replaced, as
claim_keys.py does) and `store.due_work` (the idle poll). Then the backlog is completed,
VACUUM ANALYZE again, and the same with no backlog (every claim empty), and `store.wake_due`
with nothing due. `--rounds` (3) repeats both parts on fresh databases; samples are pooled.
"""

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import TypeVar

import asyncpg
from tables import print_rows

from laneway.config import Settings
from laneway.engine import Done, Engine, EnqueueRequest, HandlerContext, Sleep, Workflow
from laneway.engine.registry import WorkflowRegistry
from laneway.model import JSONValue
from laneway.services import open_services
from laneway.store import Store, open_store
from laneway.store.databases import create_database, drop_database, throwaway_server

WAKE_WORKFLOW = "bench_wake"
CLAIM_WORKFLOW = "bench_wait_claim"
LEASE_SECONDS = 300.0
CLAIM_LIMIT = 10
BACKLOG = 1_000
ENQUEUE_BATCH = 1_000
POLL_SECONDS = 0.1  # how often the bench looks whether every instance completed
COMPLETION_TIMEOUT_SECONDS = 120.0
READY_TIMEOUT_SECONDS = 30.0

T = TypeVar("T")


async def _sleep_until(ctx: HandlerContext, params: JSONValue) -> Sleep:
    assert isinstance(params, dict)
    at = params["at"]
    assert isinstance(at, float)
    return Sleep(max(at - time.time(), 0.0), "done")


async def _done(ctx: HandlerContext, params: JSONValue) -> Done:
    return Done()


WAKE = Workflow(WAKE_WORKFLOW, handlers={"sleep": _sleep_until, "done": _done}, initial="sleep")

# $1 rows, $2 workflow (and queue). Even rows sleep; rows 1 mod 4 wait for a signal with a
# timeout; rows 3 mod 4 wait for one with none (no wake_at: not in instances_wake at all).
SEED_WAITING = """
INSERT INTO laneway.instances (instance_id, name, queue, status, attempts, max_attempts,
    params, next_action, wake_at, wait_signal, wait)
SELECT gen_random_uuid(), $2, $2, 'waiting', 0, 1, jsonb_build_object('i', g), 'done',
       CASE WHEN g % 4 = 3 THEN NULL ELSE now() + interval '1 hour' END,
       CASE WHEN g % 2 = 1 THEN 'approve' END,
       CASE WHEN g % 2 = 0 THEN '{"kind": "sleep", "seconds": 3600.0}'::jsonb
            WHEN g % 4 = 1 THEN '{"kind": "signal", "signal": "approve", "seconds": 3600.0,
                                  "on_timeout": null}'::jsonb
            ELSE '{"kind": "signal", "signal": "approve", "seconds": null,
                   "on_timeout": null}'::jsonb
       END
  FROM generate_series(0, $1::integer - 1) AS g
"""

# $1 rows, $2 workflow (and queue)
SEED_PENDING = """
INSERT INTO laneway.instances (instance_id, name, queue, status, max_attempts, run_after,
    params, next_action)
SELECT gen_random_uuid(), $2, $2, 'pending', 1, now() - interval '1 minute',
       jsonb_build_object('i', g), 'done'
  FROM generate_series(0, $1::integer - 1) AS g
"""

# $1 the claimed ids: completed, and as many new pending rows made, so the backlog stays.
COMPLETE_AND_REPLENISH = """
WITH done AS (
    UPDATE laneway.instances
       SET status = 'completed', owner_id = NULL, lease_expires_at = NULL, progress = 1,
           updated_at = now(), finished_at = now()
     WHERE instance_id = ANY($1::uuid[])
    RETURNING name, queue
)
INSERT INTO laneway.instances (instance_id, name, queue, status, max_attempts, run_after,
    params, next_action)
SELECT gen_random_uuid(), done.name, done.queue, 'pending', 1, now() - interval '1 minute',
       '{}'::jsonb, 'done'
  FROM done
"""

COMPLETE_BACKLOG = """
UPDATE laneway.instances
   SET status = 'completed', progress = 1, updated_at = now(), finished_at = now()
 WHERE status = 'pending'
"""

# $1 workflow. Per instance: the lag of its resumed event and of the first start after it,
# behind its wake time (run_after, which the wake-up set to wake_at), in ms.
LAGS = """
SELECT EXTRACT(EPOCH FROM r.at - i.run_after) * 1000 AS resumed_ms,
       EXTRACT(EPOCH FROM s.at - i.run_after) * 1000 AS started_ms
  FROM laneway.instances AS i
  JOIN laneway.events AS r ON r.instance_id = i.instance_id AND r.type = 'resumed'
 CROSS JOIN LATERAL (
    SELECT e.at
      FROM laneway.events AS e
     WHERE e.instance_id = i.instance_id
       AND e.type = 'started'
       AND e.event_id > r.event_id
     ORDER BY e.event_id
     LIMIT 1) AS s
 WHERE i.name = $1
"""

COMPLETED = "SELECT count(*) FROM laneway.instances WHERE name = $1 AND status = 'completed'"

# $1 workflow: the last instance to fall asleep, the first and last wake times, the last
# completion (all database clock), and the count of resumed events.
SPAN = """
SELECT (SELECT max(at) FROM laneway.events WHERE name = $1 AND type = 'waiting') AS last_asleep,
       (SELECT count(*) FROM laneway.events WHERE name = $1 AND type = 'resumed') AS resumed,
       min(run_after) AS first_due, max(run_after) AS last_due,
       max(finished_at) AS last_completed
  FROM laneway.instances
 WHERE name = $1
"""


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


@asynccontextmanager
async def fresh_database(server_url: str) -> AsyncIterator[str]:
    name = f"bench_wake_{uuid.uuid4().hex[:10]}"
    url = await create_database(server_url, name)
    try:
        yield url
    finally:
        await drop_database(server_url, name)


def engine_settings(url: str) -> Settings:
    """An engine's defaults (concurrency 100, poll interval 2 s) on database `url`."""
    return Settings(database_url=url)


async def run_child(url: str) -> int:
    """--engine-child: run one engine until stdin closes."""
    settings = engine_settings(url)
    async with (
        open_services(settings, workflows=[WAKE], role="worker") as services,
        services.engine.running(),
    ):
        await asyncio.to_thread(sys.stdin.read)
    return 0


@asynccontextmanager
async def engines(url: str, count: int, processes: bool) -> AsyncIterator[None]:
    """`count` running engines on `url`, here or in child processes."""
    async with AsyncExitStack() as stack:
        if processes:
            for _ in range(count):
                child = await asyncio.create_subprocess_exec(
                    sys.executable, __file__, "--engine-child", url, stdin=subprocess.PIPE
                )
                stack.push_async_callback(stop_child, child)
        else:
            for _ in range(count):
                services = await stack.enter_async_context(
                    open_services(engine_settings(url), workflows=[WAKE], role="worker")
                )
                await stack.enter_async_context(services.engine.running())
        yield


async def stop_child(child: asyncio.subprocess.Process) -> None:
    """Close the child's stdin (its signal to stop) and wait for a clean exit."""
    assert child.stdin is not None
    child.stdin.close()
    async with asyncio.timeout(30):
        code = await child.wait()
    if code != 0:
        raise RuntimeError(f"engine child {child.pid} exited with {code}")


async def wait_for(what: str, timeout: float, done: Callable[[], Awaitable[bool]]) -> None:
    """Poll `done` until it holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not await done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(POLL_SECONDS)


@dataclass(frozen=True)
class LagCase:
    label: str
    engines: int
    processes: bool


LAG_CASES = (
    LagCase("1 engine", 1, False),
    LagCase("2 engines, one process", 2, False),
    LagCase("2 engines, two processes", 2, True),
)


@dataclass
class LagRound:
    resumed_ms: list[float]
    started_ms: list[float]
    spread_s: float  # last wake time minus first
    total_s: float  # first wake time to last completion
    margin_s: float  # first wake time minus the last instance falling asleep


async def lag_round(server_url: str, case: LagCase, instances: int, base: float) -> LagRound:
    async with fresh_database(server_url) as url, open_store(url, pool_size=2) as store:
        registry = WorkflowRegistry()
        registry.register(WAKE)
        enqueuer = Engine(store, registry)  # never runs: it only enqueues
        await store.ensure_queues([WAKE.queue_name])

        async def counted(sql: str, *args: object) -> int:
            async with store.connection() as conn:
                return int(await conn.fetchval(sql, *args))

        async def ready() -> bool:
            return await counted("SELECT count(*) FROM laneway.workers") == case.engines

        async def completed() -> bool:
            return await counted(COMPLETED, WAKE_WORKFLOW) == instances

        async with engines(url, case.engines, case.processes):
            await wait_for("the engines to start", READY_TIMEOUT_SECONDS, ready)
            first = time.time() + base
            for offset in range(0, instances, ENQUEUE_BATCH):
                await enqueuer.enqueue_many(
                    [
                        EnqueueRequest(name=WAKE_WORKFLOW, params={"at": first + i / instances})
                        for i in range(offset, min(offset + ENQUEUE_BATCH, instances))
                    ]
                )

            await wait_for("every instance to complete", COMPLETION_TIMEOUT_SECONDS, completed)
        async with store.connection() as conn:
            span = await conn.fetchrow(SPAN, WAKE_WORKFLOW)
            lags = await conn.fetch(LAGS, WAKE_WORKFLOW)
    assert span is not None
    margin = (span["first_due"] - span["last_asleep"]).total_seconds()
    if margin <= 0:
        raise RuntimeError(
            f"{case.label}: the first instance was due {-margin:.3f} s before the last fell"
            " asleep; raise --base"
        )
    if span["resumed"] != instances or len(lags) != instances:
        raise RuntimeError(
            f"{case.label}: {span['resumed']} resumed events and {len(lags)} restarts"
            f" for {instances} instances"
        )
    return LagRound(
        resumed_ms=[float(r["resumed_ms"]) for r in lags],
        started_ms=[float(r["started_ms"]) for r in lags],
        spread_s=(span["last_due"] - span["first_due"]).total_seconds(),
        total_s=(span["last_completed"] - span["first_due"]).total_seconds(),
        margin_s=margin,
    )


# Microseconds per call, by (waiting instances, pending backlog, call), pooled over rounds.
Samples = dict[tuple[int, int, str], list[float]]
CALLS = (("claim", BACKLOG), ("claim", 0), ("due_work", BACKLOG), ("due_work", 0), ("wake_due", 0))


async def timed(call: Callable[[], Awaitable[T]]) -> tuple[float, T]:
    started = time.perf_counter()
    result = await call()
    return (time.perf_counter() - started) * 1e6, result


async def vacuum(store: Store) -> None:
    async with store.connection() as conn:
        for table in ("instances", "queues", "events"):
            await conn.execute(f"VACUUM (ANALYZE) laneway.{table}")


async def measure(store: Store, backlog: int, waiting: int, args: argparse.Namespace) -> Samples:
    """Claims and idle polls taking turns (and, with no backlog, wake-ups), in µs."""
    names = [f"{CLAIM_WORKFLOW}@1"]
    owner = f"wake-bench-{os.getpid()}"
    samples: Samples = {}
    for i in range(args.warmup + args.calls):
        took: dict[str, float] = {}
        took["claim"], claimed = await timed(
            lambda: store.claim(owner, names, CLAIM_LIMIT, LEASE_SECONDS)
        )
        if len(claimed) != min(CLAIM_LIMIT, backlog):
            raise RuntimeError(f"a claim of {CLAIM_LIMIT} took {len(claimed)}, backlog {backlog}")
        if claimed:
            async with store.connection() as conn:
                await conn.execute(COMPLETE_AND_REPLENISH, [r.instance_id for r in claimed])
        took["due_work"], due = await timed(lambda: store.due_work(names))
        if due.claimable != (backlog > 0) or (due.next_wake_in is None) != (waiting == 0):
            raise RuntimeError(f"the idle poll saw {due}, backlog {backlog}, waiting {waiting}")
        if backlog == 0:
            took["wake_due"], woke = await timed(store.wake_due)
            if woke != ([], False):
                raise RuntimeError(f"a wake-up with nothing due woke {woke}")
        if i >= args.warmup:
            for call, micros in took.items():
                samples.setdefault((waiting, backlog, call), []).append(micros)
    return samples


async def waiting_round(server_url: str, waiting: int, args: argparse.Namespace) -> Samples:
    """One database with `waiting` waiting instances: a backlog of 1,000, then none."""
    async with fresh_database(server_url) as url, open_store(url, pool_size=2) as store:
        await store.configure_queue(CLAIM_WORKFLOW, 1_000_000, None)
        async with store.connection() as conn:
            await conn.execute(SEED_WAITING, waiting, CLAIM_WORKFLOW)
            await conn.execute(SEED_PENDING, BACKLOG, CLAIM_WORKFLOW)
        await vacuum(store)
        samples = await measure(store, BACKLOG, waiting, args)
        async with store.connection() as conn:
            await conn.execute(COMPLETE_BACKLOG)
        await vacuum(store)
        samples |= await measure(store, 0, waiting, args)
        async with store.connection() as conn:
            still = await conn.fetchval(
                "SELECT count(*) FROM laneway.instances WHERE status = 'waiting'"
            )
        if still != waiting:
            raise RuntimeError(f"{still} instances waiting after the timings, not {waiting}")
    return samples


def lag_table(results: dict[str, list[LagRound]], instances: int, markdown: bool) -> None:
    header = ["engines", "instances", "wake spread s", "resumed p50 ms", "resumed max ms"]
    header += ["started p50 ms", "p95 ms", "p99 ms", "max ms", "first due→last completed s"]
    lines = []
    for label, rounds in results.items():
        started = [ms for r in rounds for ms in r.started_ms]
        resumed = [ms for r in rounds for ms in r.resumed_ms]
        spread = statistics.median(r.spread_s for r in rounds)
        figures = [statistics.median(resumed), max(resumed), statistics.median(started)]
        figures += [percentile(started, 0.95), percentile(started, 0.99), max(started)]
        totals = ", ".join(f"{r.total_s:.2f}" for r in rounds)
        lines.append(
            [label, f"{instances:,} × {len(rounds)}", f"{spread:.3f}"]
            + [f"{ms:.1f}" for ms in figures]
            + [totals]
        )
    print_rows(header, lines, markdown, gap=True)


def waiting_table(samples: Samples, waiting: int, markdown: bool) -> None:
    header = ["call", "backlog", "median µs, 0 waiting", "p95 µs"]
    header += [f"median µs, {waiting:,} waiting", "p95 µs", "ratio of medians"]
    lines = []
    for call, backlog in CALLS:
        empty, full = samples[0, backlog, call], samples[waiting, backlog, call]
        figures = [statistics.median(empty), percentile(empty, 0.95)]
        figures += [statistics.median(full), percentile(full, 0.95)]
        name = f"store.{call}" + (f" (limit {CLAIM_LIMIT})" if call == "claim" else "")
        lines.append(
            [name, f"{backlog:,}"]
            + [f"{us:.0f}" for us in figures]
            + [f"{figures[2] / figures[0]:.2f}"]
        )
    print_rows(header, lines, markdown, gap=True)


async def main(args: argparse.Namespace) -> int:
    given = args.database_url or os.environ.get("DATABASE_URL")
    # Durable settings as a server has them: honest figures, not a tuned throwaway.
    with throwaway_server(given, tune=False) as url:
        admin = await asyncpg.connect(url)
        version = await admin.fetchval("SHOW server_version")
        fsync = await admin.fetchval("SHOW fsync")
        await admin.close()
        print(
            f"PostgreSQL {version}, fsync={fsync}, {os.cpu_count()} cores; {args.instances:,}"
            f" sleeping instances (base {args.base} s), {args.waiting:,} waiting,"
            f" {args.calls} timed calls per figure ({args.warmup} warm-up), {args.rounds} rounds",
            file=sys.stderr,
        )
        lags: dict[str, list[LagRound]] = {}
        waits: Samples = {}
        for number in range(1, args.rounds + 1):
            for case in LAG_CASES:
                result = await lag_round(url, case, args.instances, args.base)
                lags.setdefault(case.label, []).append(result)
                print(
                    f"  round {number} {case.label}: asleep {result.margin_s:.2f} s before the"
                    f" first wake; started p50 {statistics.median(result.started_ms):.1f} ms,"
                    f" max {max(result.started_ms):.1f} ms; total {result.total_s:.2f} s",
                    file=sys.stderr,
                )
            for waiting in (0, args.waiting):
                started = time.perf_counter()
                for key, values in (await waiting_round(url, waiting, args)).items():
                    waits.setdefault(key, []).extend(values)
                print(
                    f"  round {number} {waiting:,} waiting: {time.perf_counter() - started:.1f} s",
                    file=sys.stderr,
                )
    lag_table(lags, args.instances, args.markdown)
    waiting_table(waits, args.waiting, args.markdown)
    return 0


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--instances", type=int, default=10_000, help="sleeping instances")
    parser.add_argument("--base", type=float, default=5.0, help="seconds to the first wake")
    parser.add_argument("--waiting", type=int, default=100_000, help="seeded waiting instances")
    parser.add_argument("--calls", type=int, default=300, help="timed calls per figure")
    parser.add_argument("--warmup", type=int, default=20, help="untimed calls first")
    parser.add_argument("--rounds", type=int, default=3, help="fresh databases per case")
    parser.add_argument("--database-url")
    parser.add_argument("--markdown", action="store_true", help="print markdown tables")
    parser.add_argument("--engine-child", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.instances < 1 or args.waiting < 1 or args.base <= 0:
        parser.error("--instances and --waiting must be positive, and --base above 0")
    return args


if __name__ == "__main__":
    import uvloop  # what `laneway worker` and `laneway serve` run on

    arguments = parse(sys.argv[1:])
    if arguments.engine_child:
        sys.exit(uvloop.run(run_child(arguments.engine_child)))
    sys.exit(uvloop.run(main(arguments)))
