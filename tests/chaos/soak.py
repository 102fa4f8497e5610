"""The K-01 soak (docs/reliability.md): `python -m tests.chaos.soak --minutes N` (`make soak`).

Owns one long run of the whole service at a steady load, sampled every 10 s, and its verdict
against the plan's K-01 figures. On a private PostgreSQL with durable commits it starts one
`laneway serve` (real uvicorn, LANEWAY_ENGINE=0: the API, the event hub and the websockets,
no engine) and 3 supervised workers at production parameters (lease 30 s, tick 2 s). A client
enqueues about 20 instances/s (W3, every tenth a WP that pauses and is resumed), ~20
graphql-transport-ws subscribers stay on `workflowEvents` (resuming with afterEventID after a
drop), a `* * * * *` schedule fires, a random worker is SIGKILLed 5 times (the plan's count,
spread over the run) and the serve process's LISTEN connection is terminated twice.

The serve process runs through `--serve-counting-tasks FILE`: `laneway.cli.main(["serve"])` with
a thread that writes `len(asyncio.all_tasks(loop))` to FILE, the only cheap way to read the
task count of a process whose code this script may not change.

At the end: the chaos checker's invariants, every subscriber's events against the event log
for its filter, linear-fit RSS slopes after a 20 % warm-up, fd/task/connection flatness,
table growth from 1/3 of the run to the end, dead tuples, autovacuum, the notification queue;
one table, pass or FAIL per measure. Exits 1 if any measure failed.
"""

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from array import array
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import WebSocketException
from websockets.typing import Subprotocol

from laneway.errors import ConflictError
from laneway.store.databases import create_database
from tests.chaos.harness import DATABASE_DOWN, ChaosRun, RunConfig, chaos_run
from tests.chaos.ledger import ALL_EVENTS, TERMINAL
from tests.chaos.postgres import private_server, server_version
from tests.chaos.supervisor import REPO, stop_worker
from tests.engine.helpers import eventually

# Finished instances are pruned after this long (every engine sweeps every 5 minutes), so the
# tables reach a steady size within the hour, as a deployment's would within its retention.
RETENTION_MINUTES = 10.0
CONFIG = RunConfig(
    workers=3,
    lease_seconds=30.0,
    poll_seconds=2.0,
    idle_in_transaction_seconds=60.0,
    worker_env={"LANEWAY_RETENTION_DAYS": str(RETENTION_MINUTES / 1440)},
)
POOL_SIZE = 10  # Settings().pool_size, each process's pool
CONNECTION_BOUNDS = {
    "laneway-worker": CONFIG.workers * POOL_SIZE,
    "laneway-serve": POOL_SIZE,
    "laneway-listener-worker": CONFIG.workers,
    "laneway-listener-serve": 1,
}
RATE_PER_SECOND = 20.0
WP_EVERY = 10  # every tenth instance is a WP (pause, then resume by the client)
SUBSCRIBERS = 20
WP_SUBSCRIBERS = 4  # of which this many filter on name "wp"
KILLS = 5
LISTEN_TERMINATIONS = 2
SAMPLE_SECONDS = 10.0
WARM_UP_SHARE = 0.2
FAULT_SETTLE_SECONDS = 60.0
SERVE_OWNER = "soak-serve"
SCHEDULE = "soak-cron"
HOT_TABLES = ("instances", "events")
PROTOCOL = Subprotocol("graphql-transport-ws")
SUBSCRIPTION = (
    "subscription($after: ID, $name: String) {"
    " workflowEvents(afterEventID: $after, name: $name) { eventID type instanceID } }"
)
MIB = 1024 * 1024


# -- the serve process ---------------------------------------------------------------------------


def serve_counting_tasks(path: Path) -> int:
    """`laneway serve`, with a thread writing the loop's task count to `path` every 2 s."""
    import laneway.cli as cli

    loops: list[asyncio.AbstractEventLoop] = []
    original = cli._loop_factory

    def recording_factory() -> Callable[[], asyncio.AbstractEventLoop]:
        make = original() or asyncio.new_event_loop

        def made() -> asyncio.AbstractEventLoop:
            loop = make()
            loops.append(loop)
            return loop

        return made

    cli._loop_factory = recording_factory
    threading.Thread(target=_count_tasks, args=(loops, path), daemon=True).start()
    return cli.main(["serve"])


def _count_tasks(loops: list[asyncio.AbstractEventLoop], path: Path) -> None:
    while True:
        time.sleep(2.0)
        if loops:
            with contextlib.suppress(RuntimeError):
                path.write_text(str(len(asyncio.all_tasks(loops[0]))))


@dataclass(eq=False, kw_only=True)
class Serve:
    process: asyncio.subprocess.Process
    port: int
    tasks_file: Path
    client: httpx.AsyncClient

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/graphql"

    async def health(self) -> dict[str, Any]:
        response = await self.client.get("/healthz")
        body: dict[str, Any] = response.json()
        return body

    def tasks(self) -> int | None:
        with contextlib.suppress(OSError, ValueError):
            return int(self.tasks_file.read_text())
        return None


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def serve(database_url: str, log_dir: Path) -> AsyncIterator[Serve]:
    """Start the serve process, wait for /healthz 200; SIGINT (then SIGKILL) on exit."""
    port = _free_port()
    tasks_file = log_dir / "serve-tasks"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANEWAY_")}
    env.update(
        PYTHONPATH=str(REPO),
        DATABASE_URL=database_url,
        LANEWAY_WORKFLOWS="tests.chaos.workflows",
        LANEWAY_ENGINE="0",
        LANEWAY_OWNER_ID=SERVE_OWNER,
        HOST="127.0.0.1",
        PORT=str(port),
        # one client machine opens every connection: per-client limits would measure them
        LANEWAY_RATE_LIMIT="0",
        LANEWAY_WS_HANDSHAKES_PER_MINUTE="0",
        LANEWAY_WS_CONNECTIONS_PER_TOKEN="0",
    )
    command = [sys.executable, "-m", "tests.chaos.soak", "--serve-counting-tasks", str(tasks_file)]
    with (log_dir / "serve.log").open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            *command, cwd=REPO, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log
        )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            server = Serve(process=process, port=port, tasks_file=tasks_file, client=client)
            async with asyncio.timeout(60):
                while True:
                    if process.returncode is not None:
                        raise RuntimeError(f"serve exited with {process.returncode}")
                    with contextlib.suppress(httpx.TransportError, ValueError):
                        if (await client.get("/healthz")).status_code == 200:
                            break
                    await asyncio.sleep(0.1)
            yield server
    finally:
        await stop_worker(process, timeout=30)  # uvicorn stops on SIGTERM as on SIGINT


# -- websocket subscribers -----------------------------------------------------------------------


@dataclass(eq=False, kw_only=True)
class Subscriber:
    """One graphql-transport-ws connection on `workflowEvents`, resuming after a drop."""

    index: int
    name: str | None
    received: "array[int]" = field(default_factory=lambda: array("q"))
    arrival: list[tuple[int, float]] | None = None  # (event id, wall time), for latency
    last_event_id: int = 0
    connects: int = 0

    async def run(self, url: str) -> None:
        while True:
            try:
                async with _open_ws(url) as ws:
                    await self._subscribe(ws)
                    self.connects += 1
                    await self._read(ws)
            except (OSError, WebSocketException, TimeoutError, RuntimeError):
                pass
            await asyncio.sleep(0.5)

    async def _subscribe(self, ws: ClientConnection) -> None:
        await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
        async with asyncio.timeout(30):
            reply = json.loads(await ws.recv())
        if reply.get("type") != "connection_ack":
            raise RuntimeError(f"no connection_ack: {reply}")
        variables = {"after": str(self.last_event_id), "name": self.name}
        payload = {"query": SUBSCRIPTION, "variables": variables}
        await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": payload}))

    async def _read(self, ws: ClientConnection) -> None:
        async for raw in ws:
            message = json.loads(raw)
            kind = message.get("type")
            if kind == "next":
                event = message["payload"]["data"]["workflowEvents"]
                event_id = int(event["eventID"])
                self.received.append(event_id)
                self.last_event_id = event_id
                if self.arrival is not None:
                    self.arrival.append((event_id, time.time()))
            elif kind == "ping":
                await ws.send(json.dumps({"type": "pong"}))
            elif kind in ("error", "complete"):
                raise RuntimeError(f"subscription ended: {message}")


def _open_ws(url: str) -> Any:
    return connect(
        url,
        subprotocols=[PROTOCOL],
        open_timeout=30,
        close_timeout=5,
        ping_interval=None,
        max_size=2**20,
    )


# -- sampling ------------------------------------------------------------------------------------


def _proc_rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _proc_fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def _role(application_name: str) -> str:
    if application_name.startswith("laneway-listener-"):
        owner = application_name.removeprefix("laneway-listener-")
        return "laneway-listener-serve" if owner == SERVE_OWNER else "laneway-listener-worker"
    if application_name.startswith(("laneway-", "chaos-ledger-")):
        return "-".join(application_name.split("-")[:2])
    return application_name or "(none)"


@dataclass(kw_only=True)
class Sample:
    t: float
    rss: dict[str, float]  # process key (serve, or the worker's owner id) → MiB
    fds: dict[str, int]
    tasks: int | None
    connections: dict[str, int]
    sizes: dict[str, int]
    dead: dict[str, int]
    live: dict[str, int]
    last_autovacuum: dict[str, str | None]
    notification_queue: float


async def sample(run: ChaosRun, server: Serve, started: float) -> Sample:
    processes = {"serve": server.process.pid}
    processes.update({w.owner_id: w.process.pid for w in run.supervisor.workers.values()})
    rss = {key: v for key, pid in processes.items() if (v := _proc_rss_mib(pid)) is not None}
    fds = {key: v for key, pid in processes.items() if (v := _proc_fds(pid)) is not None}
    async with run.store.connection() as conn:
        names = await conn.fetch(
            "SELECT application_name FROM pg_stat_activity WHERE datname = current_database()"
        )
        tables = await conn.fetch(
            "SELECT relname, pg_total_relation_size(relid) AS size, n_dead_tup, n_live_tup,"
            " last_autovacuum FROM pg_stat_user_tables"
            " WHERE schemaname = 'laneway' AND relname = ANY($1::text[])",
            list(HOT_TABLES),
        )
        queue = await conn.fetchval("SELECT pg_notification_queue_usage()")
    return Sample(
        t=time.monotonic() - started,
        rss=rss,
        fds=fds,
        tasks=server.tasks(),
        connections=dict(Counter(_role(row["application_name"]) for row in names)),
        sizes={row["relname"]: row["size"] for row in tables},
        dead={row["relname"]: row["n_dead_tup"] for row in tables},
        live={row["relname"]: row["n_live_tup"] for row in tables},
        last_autovacuum={
            row["relname"]: row["last_autovacuum"].isoformat() if row["last_autovacuum"] else None
            for row in tables
        },
        notification_queue=float(queue),
    )


async def sample_every(
    run: ChaosRun, server: Serve, started: float, samples: list[Sample], log: Path
) -> None:
    tick = 0
    while True:
        tick += 1
        with contextlib.suppress(*DATABASE_DOWN):
            taken = await sample(run, server, started)
            samples.append(taken)
            with log.open("a") as out:
                out.write(json.dumps(taken.__dict__) + "\n")
        await asyncio.sleep(max(0.0, started + tick * SAMPLE_SECONDS - time.monotonic()))


# -- load and faults -----------------------------------------------------------------------------


async def enqueue_for(run: ChaosRun, seconds: float) -> int:
    """Deadline-paced enqueues at RATE_PER_SECOND for `seconds`; how many."""
    started = time.monotonic()
    n = 0
    while time.monotonic() - started < seconds:
        delay = started + n / RATE_PER_SECOND - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        workflow = "wp" if n % WP_EVERY == 0 else "w3"
        await run.enqueue_one(f"soak-{n}", {"n": n}, workflow)
        n += 1
    return n


async def resume_paused(run: ChaosRun) -> int:
    rows = await run.fetch("SELECT instance_id FROM laneway.instances WHERE status = 'paused'")
    for row in rows:
        with contextlib.suppress(ConflictError):
            await run.engine.resume(row["instance_id"])
    return len(rows)


async def resume_forever(run: ChaosRun) -> None:
    while True:
        with contextlib.suppress(*DATABASE_DOWN):
            await resume_paused(run)
        await asyncio.sleep(3.0)


@dataclass(kw_only=True)
class Faults:
    kills: list[str] = field(default_factory=list)
    listener_reconnect_seconds: list[float] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # seconds into the run


async def terminate_serve_listener(run: ChaosRun, server: Serve) -> float:
    """pg_terminate_backend the serve process's LISTEN connection; seconds until it is back."""
    name = f"laneway-listener-{SERVE_OWNER}"
    query = "SELECT pid FROM pg_stat_activity WHERE application_name = $1"
    old = {row["pid"] for row in await run.fetch(query, name)}
    await run.fetch("SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid", list(old))
    started = time.monotonic()
    async with asyncio.timeout(120):
        while True:
            now = {row["pid"] for row in await run.fetch(query, name)}
            health = await server.health()
            if now - old and health.get("listener") == "ok":
                return time.monotonic() - started
            await asyncio.sleep(0.1)


async def inject_faults(
    run: ChaosRun, server: Serve, started: float, seconds: float, faults: Faults
) -> None:
    plan: list[tuple[float, str]] = [
        (seconds * i / (KILLS + 1), "kill") for i in range(1, KILLS + 1)
    ]
    plan += [(seconds * share, "listen") for share in (0.3, 0.7)[:LISTEN_TERMINATIONS]]
    for at, action in sorted(plan):
        await asyncio.sleep(max(0.0, started + at - time.monotonic()))
        faults.times.append(time.monotonic() - started)
        if action == "kill":
            slot = random.choice(list(run.supervisor.workers))
            killed = await run.supervisor.kill(slot)
            faults.kills.append(killed.owner_id)
            print(f"  {at / 60:5.1f} min: SIGKILL {killed.owner_id}", flush=True)
        else:
            took = await terminate_serve_listener(run, server)
            faults.listener_reconnect_seconds.append(took)
            print(f"  {at / 60:5.1f} min: LISTEN terminated, back in {took:.1f}s", flush=True)


async def settle(run: ChaosRun, timeout: float) -> None:
    """Resume what is paused until every instance is terminal."""
    async with asyncio.timeout(timeout):
        while True:
            await resume_paused(run)
            rows = await run.fetch(
                "SELECT count(*) AS n FROM laneway.instances WHERE status <> ALL($1::text[])",
                list(TERMINAL),
            )
            if rows[0]["n"] == 0:
                return
            await asyncio.sleep(1.0)


# -- judging -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Row:
    measure: str
    plan: str
    measured: str
    passed: bool | None  # None: reported, not judged


def slope_mib_per_hour(points: list[tuple[float, float]]) -> float:
    xs = [t for t, _ in points]
    ys = [v for _, v in points]
    return statistics.linear_regression(xs, ys).slope * 3600


def _after_warm_up(samples: list[Sample], seconds: float) -> list[Sample]:
    return [s for s in samples if seconds * WARM_UP_SHARE <= s.t <= seconds]


# A slope of 5 MiB/h over a few minutes is less than one allocation step (a pool connection is
# ~0.6 MiB; one such step in the middle of 8 minutes fits as 6.8 MiB/h, in 15 minutes as 3.6),
# so a process sampled for less than this long (a worker restarted late in the run after a
# kill) is judged by its spread alone, its slope reported. Longer would leave the workers of
# an hour's run unjudged: with a kill every 10 minutes no generation is sampled for 30.
MIN_SLOPE_MINUTES = 15.0


def memory_rows(samples: list[Sample], seconds: float) -> list[Row]:
    """RSS slope and spread per process, over its samples after the warm-up (each process:
    the run's warm-up, and the same share of the run after its own start)."""
    warm = seconds * WARM_UP_SHARE
    series: dict[str, list[tuple[float, float]]] = {}
    for s in samples:
        if s.t > seconds:
            continue
        for key, value in s.rss.items():
            series.setdefault(key, []).append((s.t, value))
    rows = []
    for key, points in series.items():
        born = points[0][0]
        kept = [(t, v) for t, v in points if t >= max(warm, born + warm)]
        if len(kept) < 6:
            continue
        values = [v for _, v in kept]
        slope = slope_mib_per_hour(kept)
        spread = (max(values) - min(values)) / min(values) * 100
        span = (kept[-1][0] - kept[0][0]) / 60
        judged = span >= MIN_SLOPE_MINUTES
        rows.append(
            Row(
                f"RSS {key}",
                "slope <= 5 MiB/h, max-min <= 10 %"
                if judged
                else f"max-min <= 10 % (slope judged from {MIN_SLOPE_MINUTES:.0f} min)",
                f"{slope:+.2f} MiB/h, {spread:.1f} % ({min(values):.0f}-{max(values):.0f} MiB"
                f" over {span:.0f} min)",
                (slope <= 5.0 or not judged) and spread <= 10.0,
            )
        )
    return rows


def _flat(values: list[float]) -> tuple[str, bool]:
    if not values:
        return "no samples", False
    middle = statistics.median(values)
    low, high = min(values), max(values)
    ok = middle > 0 and low >= middle * 0.95 and high <= middle * 1.05
    return f"{low:g}-{high:g} (median {middle:g})", ok


def flatness_rows(samples: list[Sample], seconds: float, faults: Faults) -> list[Row]:
    """fds per process (after its warm-up), serve tasks, connections per role; samples
    within FAULT_SETTLE_SECONDS after an injected fault are left out (a killed worker's
    connections are gone until its replacement opened its pool)."""
    kept = [
        s
        for s in _after_warm_up(samples, seconds)
        if not any(0 <= s.t - at <= FAULT_SETTLE_SECONDS for at in faults.times)
    ]
    warm = seconds * WARM_UP_SHARE
    rows = []
    born: dict[str, float] = {}
    for s in samples:
        for key in s.fds:
            born.setdefault(key, s.t)
    for key in born:
        values = [float(s.fds[key]) for s in kept if key in s.fds and s.t >= born[key] + warm]
        if len(values) >= 6:
            bound = statistics.median(values) + POOL_SIZE
            rows.append(Row(f"fds {key}", "no upward trend", *_bounded(values, bound)))
    tasks = [float(s.tasks) for s in kept if s.tasks is not None]
    rows.append(Row("asyncio tasks serve", "flat (+-5 %)", *_flat(tasks)))
    for role in sorted({role for s in kept for role in s.connections}):
        values = [float(s.connections.get(role, 0)) for s in kept]
        limit = CONNECTION_BOUNDS.get(role)  # the chaos client and ledger are the harness's
        measured, ok = _bounded(values, limit or 0)
        rows.append(
            Row(
                f"connections {role}",
                f"<= {limit}, no upward trend" if limit else "(harness)",
                measured,
                ok if limit else None,
            )
        )
    return rows


def _bounded(values: list[float], bound: float) -> tuple[str, bool]:
    """Never above `bound`, and no more at the end than at the start.

    For connections (and the fds their sockets hold) rather than +-5 %: a pool opens
    connections on demand, replaces those it had to close and closes those idle for 5
    minutes, so a count of 1-2 or 6-9 connections, or 18-21 fds, moves by more than 5 %
    without any leak. A leak shows as a count that
    climbs: the median of the last third above the first third's (+1).
    """
    if not values:
        return "no samples", False
    third = max(len(values) // 3, 1)
    first, last = statistics.median(values[:third]), statistics.median(values[-third:])
    ok = max(values) <= bound and last <= first + 1
    return f"{min(values):g}-{max(values):g} (median first third {first:g}, last {last:g})", ok


def table_rows(samples: list[Sample], seconds: float) -> list[Row]:
    during = [s for s in samples if s.t <= seconds]
    if not during:
        return [Row("tables", "sampled", "no samples", False)]
    third = min(during, key=lambda s: abs(s.t - seconds / 3))
    end = during[-1]
    rows = []
    for table in HOT_TABLES:
        at_third, at_end = third.sizes.get(table, 0), end.sizes.get(table, 0)
        ratio = at_end / at_third if at_third else float("inf")
        rows.append(
            Row(
                f"size laneway.{table} (+ indexes)",
                "end <= 1.5 x at 1/3",
                f"{at_third / MIB:.1f} MiB at {third.t / 60:.0f} min -> {at_end / MIB:.1f} MiB"
                f" at {end.t / 60:.0f} min ({ratio:.2f} x)",
                ratio <= 1.5,
            )
        )
        dead, live = end.dead.get(table, 0), end.live.get(table, 0)
        dead_ratio = dead / live if live else float("inf")
        rows.append(
            Row(
                f"dead/live laneway.{table}",
                "< 0.2 at the end",
                f"{dead}/{live} = {dead_ratio:.3f}",
                dead_ratio < 0.2,
            )
        )
        last = end.last_autovacuum.get(table)
        vacuum_age = (
            (datetime.now(UTC) - datetime.fromisoformat(last)).total_seconds() / 60
            if last
            else None
        )
        rows.append(
            Row(
                f"autovacuum laneway.{table}",
                "in the last 10 min",
                f"{vacuum_age:.1f} min ago" if vacuum_age is not None else "never",
                vacuum_age is not None and vacuum_age <= 10,
            )
        )
    peak = max(s.notification_queue for s in during)
    rows.append(Row("pg_notification_queue_usage()", "< 0.01", f"max {peak:g}", peak < 0.01))
    return rows


async def subscriber_rows(run: ChaosRun, subscribers: list[Subscriber]) -> list[Row]:
    """Every subscriber against the event log for its filter: missing, extra, duplicates."""
    rows = await run.fetch(ALL_EVENTS)  # pruned ones included
    by_filter: dict[str | None, set[int]] = {
        None: {row["event_id"] for row in rows},
        "wp": {row["event_id"] for row in rows if row["name"] == "wp"},
    }
    missing = extra = duplicates = 0
    reconnects = 0
    for subscriber in subscribers:
        got = set(subscriber.received)
        expected = by_filter[subscriber.name]
        missing += len(expected - got)
        extra += len(got - expected)
        duplicates += len(subscriber.received) - len(got)
        reconnects += subscriber.connects - 1
    total = sum(len(s.received) for s in subscribers)
    result = [
        Row(
            f"{len(subscribers)} subscribers vs event log",
            "0 gaps, 0 extra (after dedupe by event id)",
            f"{total} events received, {missing} missing, {extra} extra,"
            f" {duplicates} duplicates, {reconnects} reconnects",
            missing == 0 and extra == 0,
        )
    ]
    committed = {row["event_id"]: row["at"].timestamp() for row in rows}
    arrivals = subscribers[0].arrival or []
    delays = [at - committed[event_id] for event_id, at in arrivals if event_id in committed]
    if delays:
        p99 = sorted(delays)[int(0.99 * (len(delays) - 1))]
        result.append(
            Row(
                "event delivery p99 (subscriber 0, events.at -> received)",
                "< 1 s",
                f"{p99 * 1000:.0f} ms over {len(delays)} events",
                p99 < 1.0,
            )
        )
    return result


def log_errors(paths: Iterable[Path]) -> Counter[str]:
    """Warnings and errors in the JSON logs, counted by level and message."""
    counts: Counter[str] = Counter()
    for path in paths:
        for line in path.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                if "Traceback" in line:
                    counts["traceback"] += 1
                continue
            if isinstance(entry, dict) and entry.get("level") in ("warning", "error", "critical"):
                counts[f"{entry['level']}: {entry.get('message')}"] += 1
    return counts


def render(rows: list[Row]) -> str:
    lines = ["| measure | plan (K-01) | measured | result |", "|---|---|---|---|"]
    for row in rows:
        result = "-" if row.passed is None else ("pass" if row.passed else "FAIL")
        cells = [row.measure, row.plan, row.measured, result]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


# -- the run -------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def background(*coroutines: Any) -> AsyncIterator[None]:
    tasks = [asyncio.create_task(c) for c in coroutines]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def soak(admin_url: str, minutes: float, log_dir: Path) -> int:
    seconds = minutes * 60
    url = await create_database(admin_url, "soak", migrate=True)
    samples: list[Sample] = []
    faults = Faults()
    subscribers = [
        Subscriber(index=i, name="wp" if i >= SUBSCRIBERS - WP_SUBSCRIBERS else None)
        for i in range(SUBSCRIBERS)
    ]
    subscribers[0].arrival = []
    async with serve(url, log_dir) as server, chaos_run(url, CONFIG, log_dir) as run:
        await run.engine.create_schedule(SCHEDULE, "w3", {"n": None}, cron="* * * * *")
        async with background(*(s.run(server.ws_url) for s in subscribers)):
            await eventually(server.health, lambda h: h["subscribers"] >= SUBSCRIBERS, 60)
            started = time.monotonic()
            print(f"load started {datetime.now(UTC):%H:%M:%S} UTC", flush=True)
            async with background(
                sample_every(run, server, started, samples, log_dir / "samples.jsonl"),
                resume_forever(run),
                inject_faults(run, server, started, seconds, faults),
            ):
                count = await enqueue_for(run, seconds)
            print(f"load stopped: {count} enqueued, settling", flush=True)
            await run.engine.set_schedule_enabled(SCHEDULE, False)
            await settle(run, timeout=CONFIG.reclaim_max_seconds + 300)
            await _wait_delivered(run, subscribers)
        fires = await run.fetch(
            "SELECT instance_id, params FROM laneway.instances WHERE idempotency_key LIKE $1"
            " UNION ALL"  # the fires the retention sweep already deleted
            " SELECT instance_id, params::jsonb FROM chaos.pruned_instances"
            " WHERE idempotency_key LIKE $1",
            f"schedule:{SCHEDULE}:%",
        )
        run.enqueued.update({row["instance_id"]: row["params"] for row in fires})
        verdict = await run.verdict()
        rows = [
            Row(
                "invariants (tests/chaos checker)",
                "0 lost, 0 double-terminal, 0 stale, 0 unexplained dup",
                f"{len(run.enqueued)} instances ({len(fires)} cron fires): " + verdict.summary(),
                verdict.passed,
            ),
            *await subscriber_rows(run, subscribers),
        ]
        worker_logs = [w.log_path for w in [*run.supervisor.workers.values()]]
        worker_logs += [w.log_path for w in run.supervisor.retired]
    rows += memory_rows(samples, seconds)
    rows += flatness_rows(samples, seconds, faults)
    rows += table_rows(samples, seconds)
    rows.append(
        Row(
            "faults injected",
            f"{KILLS} kill -9, {LISTEN_TERMINATIONS} LISTEN terminations",
            f"kills {faults.kills}; listener back after "
            + ", ".join(f"{s:.1f}s" for s in faults.listener_reconnect_seconds),
            len(faults.kills) == KILLS
            and len(faults.listener_reconnect_seconds) == LISTEN_TERMINATIONS,
        )
    )
    errors = log_errors([log_dir / "serve.log", *worker_logs])
    rows.append(
        Row(
            "logged warnings/errors",
            "all from injected faults (judged by reading them)",
            "; ".join(f"{n} x {m[:80]}" for m, n in errors.most_common(8)) or "none",
            None,
        )
    )
    print()
    print(render(rows))
    if not verdict.passed:
        print(run.explain())
    return 0 if all(r.passed is not False for r in rows) else 1


async def _wait_delivered(run: ChaosRun, subscribers: list[Subscriber]) -> None:
    """Until every subscriber has the last event of its filter (or 60 s passed)."""
    rows = await run.fetch(
        "SELECT max(event_id) AS everything, max(event_id) FILTER"
        " (WHERE name = 'wp') AS wp FROM laneway.events"
    )
    last = {None: rows[0]["everything"] or 0, "wp": rows[0]["wp"] or 0}

    async def delivered() -> bool:
        return all(last[s.name] in set(s.received[-2000:]) for s in subscribers)

    with contextlib.suppress(TimeoutError):
        await eventually(delivered, bool, 60)


def _machine() -> str:
    memory = ""
    with contextlib.suppress(OSError):
        total_kib = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f", {total_kib / MIB:.1f} GiB RAM"
    return (
        f"{os.cpu_count()} cores, {platform.machine()}{memory}, Python {platform.python_version()}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=60.0, help="load duration (default 60)")
    parser.add_argument("--serve-counting-tasks", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_counting_tasks is not None:
        return serve_counting_tasks(args.serve_counting_tasks)
    log_dir = Path(tempfile.mkdtemp(prefix="laneway-soak-"))
    print(
        f"K-01 soak: {args.minutes:g} min at {RATE_PER_SECOND:g}/s (W3, 1 in {WP_EVERY} WP),"
        f" {CONFIG.workers} workers, lease {CONFIG.lease_seconds:g}s, tick"
        f" {CONFIG.poll_seconds:g}s, {SUBSCRIBERS} subscribers, serve LANEWAY_ENGINE=0",
        flush=True,
    )
    print(f"machine: {_machine()}; logs and samples: {log_dir}", flush=True)
    with private_server() as admin_url:
        print(f"PostgreSQL {asyncio.run(server_version(admin_url))}", flush=True)
        return asyncio.run(soak(admin_url, args.minutes, log_dir))


if __name__ == "__main__":
    sys.exit(main())
