"""Service benchmark: event → subscriber latency, websocket fan-out, idle queries, claim latency.

Run with `.venv/bin/python bench/service_bench.py [--rounds 3] [--quick]`. It uses
DATABASE_URL when set, else a throwaway embedded PostgreSQL with its default (durable)
settings. The Laneway server is always a real process: `python -m app`, the service
(create_app and server_config under uvicorn, as deployed), LANEWAY_WORKFLOWS=app.examples, on a
fresh database
per scenario; the bench process is the client (plain `websockets` speaking graphql-transport-ws,
httpx for mutations, asyncpg for bulk writes and counters). Rounds are interleaved; the table
shows medians with min–max. Not part of `make test`.

1. event → subscriber latency: one subscriber; `hello` instances enqueued over HTTP one at a
   time, each after the previous one's `completed` event arrived; for every event (enqueued,
   started, completed) the time from its `at` (clock_timestamp() at the append, before the
   commit) to its receipt by the client, on the same machine clock. Engine on.
2. fan-out: N websocket subscribers (N = 1, 100, 1000) on one server process with its engine
   off (an API-only process: the figure is the hub and the websocket path, not job
   execution); the bench writes K `enqueued` events with Engine.enqueue_many (transactions of
   100) and counts every frame every subscriber receives. Deliveries/s = N·K / time from the
   first write to the last receipt. Each subscriber must receive exactly K frames. The round
   log shows the CPU of the server, the bench, PostgreSQL and everything else meanwhile, and
   the slowest /healthz answer (how long the rest of the process waits behind the fan-out).
3. idle queries/minute: a server with its engine on, idle on a fresh database; after a 10 s
   settle, what that database saw over the window, counted from another connection: the
   statements the server logged with log_statement=all set on that database only (when the
   server log is readable: the embedded server), pg_stat_statements calls (when the server
   preloads it; the embedded one does not), and pg_stat_database xact_commit + xact_rollback
   (always; a lower bound, see `transactions`).
4. claim latency: Store.claim(owner, names, limit=1) of a single due pending instance in a
   table with 1,000,000 completed instances vs an empty one (both VACUUM ANALYZEd after the
   load, as autovacuum would), alternating between the two; median ms and the ratio. Once,
   before that ANALYZE, the same claim on the loaded table without statistics (autovacuum
   held off during the load): the state right after a bulk load, or with stale statistics.
5. requests: server CPU per request of /healthz, `{ __typename }` and a 50-row page, and
   enqueueWorkflow over HTTP with 10 keep-alive clients next to Engine.enqueue one by one
   (bench/request_path.py).

`--profile-server FILE` runs the server of the largest fan-out case of the last round under
cProfile and prints where its time went.

Never sleeps to shape a figure: every wait has a deadline and every loop a bound.
"""

import argparse
import asyncio
import contextlib
import json
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.typing import Subprotocol

from laneway.engine import Engine, EnqueueRequest, WorkflowRegistry
from laneway.store import Store, open_store, queries
from laneway.store.databases import create_database, drop_database, throwaway_server
from laneway.store.store import EVENTS_LOCK_KEY

ROOT = Path(__file__).resolve().parents[1]
# The bench measures the service (app/, not in the wheel): its example workflows are loaded by
# module name here as the server loads them, so the repository root must be importable.
sys.path.insert(0, str(ROOT))
WORKFLOW_MODULES = ("app.examples",)
SUBSCRIPTION = "subscription { workflowEvents { eventID type instanceID at } }"
ENQUEUE = 'mutation($p: JSON) { enqueueWorkflow(name: "hello", params: $p) { instanceID } }'
PROTOCOL = Subprotocol("graphql-transport-ws")
WRITE_BATCH = 100
SERVER_START_SECONDS = 60.0
IDLE_SETTLE_SECONDS = 10.0
CLAIM_WARMUP = 10
LATENCY_WARMUP = 5
LOG_LINE = re.compile(rb"\bLOG:  (?:statement|execute [^:\n]*):")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

Figures = dict[str, float]


# -- small helpers -------------------------------------------------------------------------------


def new_name(kind: str) -> str:
    return f"svcbench_{kind}_{uuid.uuid4().hex[:8]}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of one process, from /proc (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def children_cpu_seconds(parent: int | None) -> float:
    """CPU of `parent` and its children: the PostgreSQL postmaster and its backends."""
    if parent is None:
        return 0.0
    total = process_cpu_seconds(parent)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent:
            total += process_cpu_seconds(int(entry.name))
    return total


def machine_busy_seconds() -> float:
    """CPU time every core spent on anything but idling, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle, iowait = values[3], values[4]
    return (sum(values[:8]) - idle - iowait) / CLOCK_TICKS


async def machine_busy_percent(seconds: float = 1.0) -> float:
    """How busy the machine is over `seconds` (100% = one core)."""
    before = machine_busy_seconds()
    await asyncio.sleep(seconds)
    return (machine_busy_seconds() - before) / seconds * 100


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class CpuWindow:
    """CPU used over a wall-clock window by the server, this bench process, the PostgreSQL
    server (when it runs on this machine) and everything else (100% = one core)."""

    server_pid: int
    postmaster_pid: int | None
    started: float = 0.0
    marks: tuple[float, ...] = ()

    def _read(self) -> tuple[float, ...]:
        return (
            process_cpu_seconds(self.server_pid),
            own_cpu_seconds(),
            children_cpu_seconds(self.postmaster_pid),
            machine_busy_seconds(),
        )

    def start(self) -> None:
        self.started = time.perf_counter()
        self.marks = self._read()

    def stop(self) -> str:
        wall = time.perf_counter() - self.started
        server, bench, pg, busy = (
            (b - a) / wall * 100 for a, b in zip(self.marks, self._read(), strict=True)
        )
        pg_text = f"{pg:.0f}%" if self.postmaster_pid else "n/a"
        other = busy - server - bench - (pg if self.postmaster_pid else 0.0)
        return (
            f"CPU server {server:.0f}%, bench {bench:.0f}%, postgres {pg_text},"
            f" other {max(other, 0.0):.0f}% (of {os.cpu_count()}00%)"
        )


def postgres_parent(pid: int) -> int | None:
    """The parent of a PostgreSQL backend on this machine: the postmaster (else None)."""
    try:
        if Path(f"/proc/{pid}/comm").read_text().strip() != "postgres":
            return None
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


async def postmaster_pid(server_url: str) -> int | None:
    """The PostgreSQL postmaster's pid when it runs on this machine (else None)."""
    conn = await asyncpg.connect(server_url)
    try:
        return postgres_parent(int(await conn.fetchval("SELECT pg_backend_pid()")))
    finally:
        await conn.close()


async def wait_until(
    check: Callable[[], Awaitable[bool]], seconds: float, what: str, interval: float = 0.05
) -> None:
    """Poll `check` until it holds; TimeoutError naming `what` after `seconds`."""
    try:
        async with asyncio.timeout(seconds):
            while True:
                if await check():
                    return
                await asyncio.sleep(interval)
    except TimeoutError:
        raise TimeoutError(f"timed out after {seconds:.0f} s waiting for {what}") from None


# -- the server process --------------------------------------------------------------------------


@dataclass
class ServerProcess:
    """`python -m app` (the service) on a free loopback port, its log in a file."""

    process: asyncio.subprocess.Process
    port: int
    log_path: Path
    client: httpx.AsyncClient

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/graphql"

    async def health(self) -> dict[str, Any]:
        response = await self.client.get("/healthz")
        body: dict[str, Any] = response.json()
        body["status_code"] = response.status_code
        return body

    async def wait_for_subscribers(self, count: int, seconds: float) -> None:
        async def registered() -> bool:
            return int((await self.health())["subscribers"]) >= count

        await wait_until(registered, seconds, f"{count} subscribers", interval=0.2)

    async def graphql(self, query: str, **variables: Any) -> dict[str, Any]:
        response = await self.client.post("/graphql", json={"query": query, "variables": variables})
        body: dict[str, Any] = response.json()
        if response.status_code != 200 or body.get("errors"):
            raise RuntimeError(f"GraphQL call failed: {response.status_code} {response.text}")
        return body


def server_env(database_url: str, port: int, *, engine: bool) -> dict[str, str]:
    """The environment of the server: this one without Laneway's own settings, then ours."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("LANEWAY_") and key not in ("DATABASE_URL", "PORT", "HOST")
    }
    env.update(
        DATABASE_URL=database_url,
        LANEWAY_WORKFLOWS=",".join(WORKFLOW_MODULES),
        LANEWAY_ENGINE="1" if engine else "0",
        PORT=str(port),
        HOST="127.0.0.1",
        # One client machine opens every connection here: per-client limits would measure
        # the limiter, not the service.
        LANEWAY_RATE_LIMIT="0",
        LANEWAY_WS_HANDSHAKES_PER_MINUTE="0",
        LANEWAY_WS_CONNECTIONS_PER_TOKEN="0",
        LANEWAY_MAX_CONNECTIONS="0",
    )
    return env


@contextlib.asynccontextmanager
async def running_server(
    database_url: str, work_dir: Path, *, engine: bool, profile_to: Path | None = None
) -> AsyncIterator[ServerProcess]:
    """Start the server, wait until /healthz is 200, stop it with SIGINT (then SIGKILL)."""
    port = free_port()
    log_path = work_dir / f"server-{port}.log"
    command = [sys.executable]
    if profile_to is not None:
        command += ["-m", "cProfile", "-o", str(profile_to)]
    command += ["-m", "app"]
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            *command,
            cwd=ROOT,
            env=server_env(database_url, port, engine=engine),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            server = ServerProcess(process=process, port=port, log_path=log_path, client=client)

            async def healthy() -> bool:
                if process.returncode is not None:
                    tail = log_path.read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"server exited with {process.returncode}:\n{tail}")
                try:
                    return int((await server.health())["status_code"]) == 200
                except httpx.TransportError:
                    return False

            await wait_until(healthy, SERVER_START_SECONDS, "the server to be healthy", 0.1)
            yield server
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
            try:
                async with asyncio.timeout(30):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()
        report_server_warnings(log_path)


def report_server_warnings(log_path: Path) -> None:
    """Print the warnings and errors the server logged (JSON lines), counted by message."""
    counts: dict[str, int] = {}
    for line in log_path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            entry = {"level": "error", "message": line} if "Traceback" in line else {}
        if isinstance(entry, dict) and entry.get("level") in ("warning", "error", "critical"):
            key = f"{entry['level']}: {entry.get('message')}"
            counts[key] = counts.get(key, 0) + 1
    for message, count in counts.items():
        print(f"    server log: {count} × {message}", file=sys.stderr)


@contextlib.asynccontextmanager
async def fresh_database(server_url: str, kind: str) -> AsyncIterator[str]:
    name = new_name(kind)
    url = await create_database(server_url, name, migrate=True)
    try:
        yield url
    finally:
        await drop_database(server_url, name)


@contextlib.asynccontextmanager
async def writer_engine(database_url: str) -> AsyncIterator[Engine]:
    """An engine in this process for writing only: its loop never runs."""
    async with open_store(database_url, pool_size=2) as store:
        yield Engine(store, WorkflowRegistry.from_modules(WORKFLOW_MODULES))


# -- websocket subscribers -----------------------------------------------------------------------


async def subscribe(ws: ClientConnection) -> None:
    """graphql-transport-ws: connection_init, wait for the ack, subscribe to every event."""
    await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
    async with asyncio.timeout(30):
        reply = json.loads(await ws.recv())
    if reply.get("type") != "connection_ack":
        raise RuntimeError(f"no connection_ack: {reply}")
    await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": SUBSCRIPTION}}))


def open_ws(url: str) -> Any:
    return connect(
        url,
        subprotocols=[PROTOCOL],
        open_timeout=60,
        close_timeout=10,
        ping_interval=None,  # the server pings; the client only answers
        max_size=2**20,
    )


# -- 1. event → subscriber latency ---------------------------------------------------------------


async def latency_round(server_url: str, work_dir: Path, count: int) -> Figures:
    async with (
        fresh_database(server_url, "latency") as url,
        running_server(url, work_dir, engine=True) as server,
        open_ws(server.ws_url) as ws,
    ):
        await subscribe(ws)
        await server.wait_for_subscribers(1, 30)
        received: list[tuple[float, dict[str, Any]]] = []
        completed: dict[str, asyncio.Event] = {}

        async def read() -> None:
            while True:
                raw = await ws.recv()
                now_ms = time.time() * 1000.0
                message = json.loads(raw)
                if message.get("type") != "next":
                    raise RuntimeError(f"unexpected message: {message}")
                event = message["payload"]["data"]["workflowEvents"]
                received.append((now_ms, event))
                if event["type"] == "completed":
                    completed.setdefault(event["instanceID"], asyncio.Event()).set()

        reader = asyncio.create_task(read())
        cpu = CpuWindow(server.pid, await postmaster_pid(server_url))
        cpu.start()
        try:
            measured_from = 0
            for i in range(LATENCY_WARMUP + count):
                if i == LATENCY_WARMUP:
                    measured_from = len(received)
                body = await server.graphql(ENQUEUE, p={"name": f"bench {i}"})
                instance_id = body["data"]["enqueueWorkflow"]["instanceID"]
                done = completed.setdefault(instance_id, asyncio.Event())
                async with asyncio.timeout(30):
                    await done.wait()
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        usage = cpu.stop()
    measured = received[measured_from:]
    if len(measured) != 3 * count:
        raise RuntimeError(f"expected {3 * count} events, received {len(measured)}")
    samples = [now - float(event["at"]) for now, event in measured]
    by_type: dict[str, list[float]] = {}
    for now, event in measured:
        by_type.setdefault(event["type"], []).append(now - float(event["at"]))
    print(
        f"    {len(samples)} events; p50 by type: "
        + ", ".join(f"{k} {statistics.median(v):.2f} ms" for k, v in by_type.items())
        + f"; {usage}",
        file=sys.stderr,
    )
    return {
        "event→subscriber p50 ms": percentile(samples, 0.50),
        "event→subscriber p99 ms": percentile(samples, 0.99),
    }


# -- 2. fan-out ----------------------------------------------------------------------------------


@dataclass
class FanOut:
    """Shared counters of one fan-out run."""

    expected_each: int
    subscribers: int
    received: int = 0
    finished: int = 0
    last_receipt: float = 0.0
    ready: int = 0
    all_done: asyncio.Event = field(default_factory=asyncio.Event)
    counts: list[int] = field(default_factory=list)


async def fan_out_client(url: str, state: FanOut, connecting: asyncio.Semaphore) -> None:
    async with connecting:  # a bounded number of handshakes at once
        ws = await open_ws(url)
        try:
            await subscribe(ws)
        except BaseException:
            await ws.close()
            raise
    async with ws:
        state.ready += 1
        count = 0
        while count < state.expected_each:
            raw = await ws.recv(decode=False)
            if b'"next"' not in raw:
                raise RuntimeError(f"unexpected message: {raw[:200]!r}")
            count += 1
            state.received += 1
        state.last_receipt = time.perf_counter()
        state.counts.append(count)
        state.finished += 1
        if state.finished == state.subscribers:
            state.all_done.set()
        await state.all_done.wait()  # stay connected until everyone has everything


async def health_probe(server: ServerProcess, done: asyncio.Event) -> float:
    """The slowest /healthz answer (s) until `done`, one request at a time, every 0.5 s: how
    long the rest of the process (HTTP, engine, listener) waits behind the fan-out."""
    slowest = 0.0
    while not done.is_set():
        started = time.perf_counter()
        with contextlib.suppress(httpx.TimeoutException):  # counted as the time it took
            await server.health()
        slowest = max(slowest, time.perf_counter() - started)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.5):
                await done.wait()
    return slowest


def fanout_events(subscribers: int, deliveries: int) -> int:
    return max(100, min(20_000, deliveries // subscribers))


async def fanout_round(
    server_url: str,
    work_dir: Path,
    subscribers: int,
    deliveries: int,
    profile_to: Path | None = None,
) -> Figures:
    events = fanout_events(subscribers, deliveries)
    state = FanOut(expected_each=events, subscribers=subscribers)
    async with (
        fresh_database(server_url, f"fanout{subscribers}") as url,
        writer_engine(url) as engine,
        running_server(url, work_dir, engine=False, profile_to=profile_to) as server,
    ):
        connecting = asyncio.Semaphore(50)
        tasks = [
            asyncio.create_task(fan_out_client(server.ws_url, state, connecting))
            for _ in range(subscribers)
        ]

        async def connected() -> bool:
            for task in tasks:
                if task.done():
                    task.result()  # a client that failed raises here; none ends early
                    raise RuntimeError("a subscriber ended before any event was written")
            return state.ready == subscribers

        probe: asyncio.Task[float] | None = None
        try:
            await wait_until(connected, 120, f"{subscribers} subscriptions")
            await server.wait_for_subscribers(subscribers, 120)
            cpu = CpuWindow(server.pid, await postmaster_pid(server_url))
            cpu.start()
            probe = asyncio.create_task(health_probe(server, state.all_done))
            started = time.perf_counter()
            request = EnqueueRequest(name="hello", params={"name": "fan-out"})
            for offset in range(0, events, WRITE_BATCH):
                await engine.enqueue_many([request] * min(WRITE_BATCH, events - offset))
            written = time.perf_counter() - started
            deadline = max(60.0, subscribers * events / 1000.0)
            finished = asyncio.create_task(state.all_done.wait())
            await asyncio.wait(
                [finished, *tasks], timeout=deadline, return_when=asyncio.FIRST_COMPLETED
            )
            finished.cancel()
            if not state.all_done.is_set():
                for task in tasks:
                    if task.done():
                        task.result()  # a subscriber that failed raises here
                raise RuntimeError(
                    f"fan-out {subscribers}: {state.received} of {subscribers * events}"
                    f" frames after {deadline:.0f} s"
                )
            elapsed = state.last_receipt - started
            usage = cpu.stop()
            slowest_health = await probe
            await asyncio.gather(*tasks)
        finally:
            pending: list[asyncio.Task[Any]] = [*tasks, *([probe] if probe else [])]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
    if state.counts != [events] * subscribers:
        raise RuntimeError(f"uneven deliveries: {sorted(set(state.counts))}")
    rate = subscribers * events / elapsed
    print(
        f"    {subscribers} subscribers × {events} events = {subscribers * events:,} frames"
        f" in {elapsed:.2f} s (writes took {written:.2f} s); {usage};"
        f" slowest /healthz meanwhile {slowest_health * 1000:,.0f} ms",
        file=sys.stderr,
    )
    return {f"fan-out {subscribers:,} subs deliveries/s": rate}


# -- 3. idle queries -----------------------------------------------------------------------------


async def statement_log(admin: asyncpg.Connection, database: str) -> Path | None:
    """Turn on log_statement=all for `database` and return the server log, when both work."""
    try:
        await admin.execute(f"ALTER DATABASE \"{database}\" SET log_statement = 'all'")
        current = await admin.fetchval("SELECT pg_current_logfile()")
        data_dir = Path(await admin.fetchval("SELECT current_setting('data_directory')"))
    except asyncpg.PostgresError:
        return None
    # Without the logging collector, pgserver has pg_ctl send the log to data_directory/log.
    path = data_dir / current if current else data_dir / "log"
    return path if path.is_file() and os.access(path, os.R_OK) else None


def log_size(path: Path | None) -> int:
    return path.stat().st_size if path is not None else 0


def count_logged(path: Path | None, offset: int) -> int:
    """Statements the server logged after `offset` (only one database logs them)."""
    if path is None:
        return 0
    with path.open("rb") as log:
        log.seek(offset)
        return len(LOG_LINE.findall(log.read()))


async def transactions(admin: asyncpg.Connection, database: str) -> int:
    """xact_commit + xact_rollback of `database`. PostgreSQL 15+ flushes a backend's count
    only with other pending statistics, so transactions that touch no table (the listener's
    heartbeat) are missed: a lower bound."""
    value = await admin.fetchval(
        "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1", database
    )
    return int(value)


async def statement_stats(url: str) -> asyncpg.Connection | None:
    """A connection to the measured database that reads pg_stat_statements, when the server
    preloads it (the embedded one does not); the extension goes with the throwaway database."""
    conn = await asyncpg.connect(url)
    try:
        preload = await conn.fetchval("SELECT current_setting('shared_preload_libraries')")
        if "pg_stat_statements" in str(preload):
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            return conn
    except asyncpg.PostgresError:
        pass
    await conn.close()
    return None


async def statement_calls(conn: asyncpg.Connection) -> int:
    """Calls in this database, less this reader's own (its text names the view)."""
    value = await conn.fetchval(
        "SELECT COALESCE(sum(calls), 0) FROM pg_stat_statements"
        " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
        "   AND query NOT LIKE '%pg_stat_statements%'"
    )
    return int(value)


async def idle_round(server_url: str, work_dir: Path, seconds: float) -> Figures:
    name = new_name("idle")
    url = await create_database(server_url, name, migrate=True)
    admin = await asyncpg.connect(server_url)  # another database: not counted
    stats = await statement_stats(url)
    try:
        log_path = await statement_log(admin, name)
        async with running_server(url, work_dir, engine=True) as server:
            await asyncio.sleep(IDLE_SETTLE_SECONDS)  # the brief's settle time, not a figure
            cpu = CpuWindow(server.pid, await postmaster_pid(server_url))
            cpu.start()
            offset = log_size(log_path)
            calls_before = await statement_calls(stats) if stats else 0
            before = await transactions(admin, name)
            started = time.perf_counter()
            await asyncio.sleep(seconds)
            after = await transactions(admin, name)
            calls_after = await statement_calls(stats) if stats else 0
            elapsed = time.perf_counter() - started
            logged = count_logged(log_path, offset)
            usage = cpu.stop()
    finally:
        if stats is not None:
            await stats.close()
        await admin.close()
        await drop_database(server_url, name)
    per_minute = 60.0 / elapsed
    figures: Figures = {}
    notes = [f"{after - before} transactions"]
    if log_path is not None:
        figures["idle statements/min (server log)"] = logged * per_minute
        notes.append(f"{logged} logged statements")
    if stats is not None:
        figures["idle statements/min (pg_stat_statements)"] = (
            calls_after - calls_before
        ) * per_minute
        notes.append(f"{calls_after - calls_before} pg_stat_statements calls")
    figures["idle transactions/min (pg_stat_database)"] = (after - before) * per_minute
    print(f"    {', '.join(notes)} in {elapsed:.1f} s; {usage}", file=sys.stderr)
    return figures


# -- 4. claim latency ----------------------------------------------------------------------------

# $1 first number, $2 last number, $3 rows in all: completed `hello` instances spread over the
# past (one per second), with the shape the engine leaves behind.
INSERT_FINISHED = """
INSERT INTO laneway.instances (instance_id, name, queue, status, priority, attempts,
    max_attempts, run_after, params, state, result, progress, created_at, updated_at,
    finished_at)
SELECT gen_random_uuid(), 'hello', 'hello', 'completed', 0, 1, 1, t.at,
       jsonb_build_object('name', 'bench ' || g), '{}'::jsonb,
       jsonb_build_object('greeting', 'Hello, bench ' || g || '!'), 1, t.at, t.at, t.at
  FROM generate_series($1::bigint, $2::bigint) AS g
 CROSS JOIN LATERAL (SELECT now() - ($3 - g) * interval '1 second' AS at) AS t
"""

FINISH_CLAIMED = """
UPDATE laneway.instances
   SET status = 'completed', owner_id = NULL, lease_expires_at = NULL, progress = 1,
       updated_at = now(), finished_at = now()
 WHERE instance_id = $1
"""


@dataclass
class ClaimDatabases:
    empty_url: str
    full_url: str
    names: list[str]
    before_analyze: Figures


async def load_finished(url: str, rows: int) -> None:
    conn = await asyncpg.connect(url)
    try:
        started = time.perf_counter()
        batch = 100_000
        for first in range(1, rows + 1, batch):
            await conn.execute(INSERT_FINISHED, first, min(first + batch - 1, rows), rows)
        print(
            f"  loaded {rows:,} completed instances in {time.perf_counter() - started:.1f} s",
            file=sys.stderr,
        )
    finally:
        await conn.close()


async def set_autovacuum(url: str, enabled: bool) -> None:
    conn = await asyncpg.connect(url)
    try:
        if enabled:
            await conn.execute("ALTER TABLE laneway.instances RESET (autovacuum_enabled)")
        else:
            await conn.execute("ALTER TABLE laneway.instances SET (autovacuum_enabled = off)")
    finally:
        await conn.close()


async def vacuum_analyze(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("VACUUM (ANALYZE) laneway.instances")
        await conn.execute("VACUUM (ANALYZE) laneway.queues")
    finally:
        await conn.close()


def timed_claims(engine: Engine, names: list[str]) -> Callable[[], Awaitable[float]]:
    """One due pending instance, claimed (timed, ms), then marked completed (not timed)."""
    owner = f"svcbench-{os.getpid()}"
    store: Store = engine.store

    async def claim_one() -> float:
        await engine.enqueue("hello", {"name": "claim"})
        started = time.perf_counter()
        claimed = await store.claim(owner, names, 1, 30.0)
        elapsed = time.perf_counter() - started
        if len(claimed) != 1:
            raise RuntimeError(f"claimed {len(claimed)} instances, not 1")
        async with store.connection() as conn:
            await conn.execute(FINISH_CLAIMED, claimed[0].instance_id)
        return elapsed * 1000.0

    return claim_one


@contextlib.asynccontextmanager
async def claim_databases(
    server_url: str, rows: int, stale_count: int
) -> AsyncIterator[ClaimDatabases]:
    """The empty and the loaded table, both VACUUM ANALYZEd. Before that, once: claims on
    the loaded table with no statistics yet (autovacuum held off during the load), the state
    right after a bulk load or with stale statistics."""
    empty, full = new_name("claim_empty"), new_name("claim_full")
    try:
        empty_url = await create_database(server_url, empty, migrate=True)
        full_url = await create_database(server_url, full, migrate=True)
        registry = WorkflowRegistry.from_modules(WORKFLOW_MODULES)
        names = registry.runs()
        for url in (empty_url, full_url):
            async with open_store(url, pool_size=2) as store:
                await store.ensure_queues({w.queue_name for w in registry})
        await set_autovacuum(full_url, False)
        await load_finished(full_url, rows)
        async with writer_engine(full_url) as engine:
            await explain_claim(engine, names, f"{rows:,} finished, before ANALYZE")
            claim_one = timed_claims(engine, names)
            stale = [await claim_one() for _ in range(stale_count)]
        await set_autovacuum(full_url, True)
        for url in (empty_url, full_url):
            await vacuum_analyze(url)
        before_analyze = {f"claim ms, {rows:,} finished, before ANALYZE": statistics.median(stale)}
        yield ClaimDatabases(empty_url, full_url, names, before_analyze)
    finally:
        await drop_database(server_url, empty)
        await drop_database(server_url, full)


async def explain_claim(engine: Engine, names: list[str], label: str) -> None:
    """Execution time of one claim (laneway.claim, in a rolled-back transaction)."""
    await engine.enqueue("hello", {"name": "explain"})
    async with engine.store.connection() as conn:
        transaction = conn.transaction()
        await transaction.start()
        try:
            plan = await conn.fetchval(
                f"EXPLAIN (ANALYZE, FORMAT JSON) {queries.CLAIM}",
                "explain",
                names,
                1,
                30.0,
                EVENTS_LOCK_KEY,
            )
            plan = json.loads(plan) if isinstance(plan, str) else plan
            took = float(plan[0]["Execution Time"])
        finally:
            await transaction.rollback()
    print(f"    {label}: claim {took:.3f} ms (EXPLAIN ANALYZE execution time)", file=sys.stderr)
    async with engine.store.connection() as conn:
        await conn.execute(
            "UPDATE laneway.instances SET status = 'cancelled', finished_at = now()"
            " WHERE status = 'pending'"
        )


async def claim_round(databases: ClaimDatabases, count: int, rows: int) -> Figures:
    samples: dict[str, list[float]] = {"empty": [], "full": []}
    async with (
        writer_engine(databases.empty_url) as empty,
        writer_engine(databases.full_url) as full,
    ):
        engines = {"empty": empty, "full": full}
        claims = {}
        for label, engine in engines.items():
            await explain_claim(engine, databases.names, label)
            claims[label] = timed_claims(engine, databases.names)
        for i in range(CLAIM_WARMUP + count):
            for label, claim_one in claims.items():  # alternating: drift hits both alike
                elapsed = await claim_one()
                if i >= CLAIM_WARMUP:
                    samples[label].append(elapsed)
    empty_ms, full_ms = (statistics.median(samples[k]) for k in ("empty", "full"))
    print(
        f"    claim p95: empty {percentile(samples['empty'], 0.95):.2f} ms,"
        f" {rows:,} finished {percentile(samples['full'], 0.95):.2f} ms",
        file=sys.stderr,
    )
    return {
        "claim ms, empty table": empty_ms,
        f"claim ms, {rows:,} finished": full_ms,
        "claim ratio finished/empty": full_ms / empty_ms,
    }


# -- driver --------------------------------------------------------------------------------------


def raise_open_files(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def print_profile(path: Path, top: int = 30) -> None:
    import pstats

    print(f"\nserver profile ({path}), top {top} by own time:", file=sys.stderr)
    stats = pstats.Stats(str(path), stream=sys.stderr)
    stats.sort_stats("tottime").print_stats(top)


async def describe(server_url: str) -> str:
    admin = await asyncpg.connect(server_url)
    try:
        rows = await admin.fetch(
            "SELECT name, setting FROM pg_settings"
            " WHERE name IN ('fsync', 'synchronous_commit', 'server_version')"
        )
    finally:
        await admin.close()
    settings = {row["name"]: row["setting"] for row in rows}
    return (
        f"PostgreSQL {settings.get('server_version')}, fsync={settings.get('fsync')},"
        f" synchronous_commit={settings.get('synchronous_commit')}; {os.cpu_count()} CPUs,"
        f" {await machine_busy_percent():.0f}% busy before the start (of {os.cpu_count()}00%;"
        " other jobs skew every figure)"
    )


async def main(args: argparse.Namespace) -> int:
    raise_open_files(2 * max(args.subscribers) + 256)
    figures: dict[str, list[float]] = {}
    work_dir = Path(tempfile.mkdtemp(prefix="laneway-svcbench-"))
    given = args.database_url or os.environ.get("DATABASE_URL")
    began = time.perf_counter()
    with throwaway_server(given, tune=False) as server_url:
        print(
            f"{await describe(server_url)}; {args.rounds} rounds;"
            f" server logs in {work_dir} (deleted after a run that completes)",
            file=sys.stderr,
        )

        def record(result: Figures) -> None:
            for key, value in result.items():
                figures.setdefault(key, []).append(value)
            print("    " + ", ".join(f"{k} {v:,.2f}" for k, v in result.items()), file=sys.stderr)

        claim_context = (
            claim_databases(server_url, args.finished_rows, min(50, args.claim_count))
            if "claim" in args.scenarios
            else contextlib.nullcontext()
        )
        async with claim_context as claim_dbs:
            for round_number in range(1, args.rounds + 1):
                last = round_number == args.rounds
                if "latency" in args.scenarios:
                    print(f"  round {round_number} latency", file=sys.stderr)
                    record(await latency_round(server_url, work_dir, args.latency_count))
                if "fanout" in args.scenarios:
                    for n in args.subscribers:
                        print(f"  round {round_number} fan-out {n}", file=sys.stderr)
                        profile = (
                            args.profile_server
                            if last and args.profile_server and n == max(args.subscribers)
                            else None
                        )
                        record(
                            await fanout_round(server_url, work_dir, n, args.deliveries, profile)
                        )
                if "idle" in args.scenarios:
                    print(f"  round {round_number} idle", file=sys.stderr)
                    record(await idle_round(server_url, work_dir, args.idle_seconds))
                if "claim" in args.scenarios:
                    assert claim_dbs is not None
                    print(f"  round {round_number} claim", file=sys.stderr)
                    record(await claim_round(claim_dbs, args.claim_count, args.finished_rows))
                if "requests" in args.scenarios:
                    from request_path import requests_round  # it imports this module's helpers

                    print(f"  round {round_number} requests", file=sys.stderr)
                    record(await requests_round(server_url, work_dir, args.request_count))
            if claim_dbs is not None:
                record(claim_dbs.before_analyze)  # measured once, while setting up
    shutil.rmtree(work_dir, ignore_errors=True)
    if args.profile_server and args.profile_server.exists():
        print_profile(args.profile_server)
    print(
        f"\n{args.rounds} rounds in {time.perf_counter() - began:.0f} s"
        f"; latency over {3 * args.latency_count} events per round"
        f"; idle window {args.idle_seconds:.0f} s",
    )
    width = max(len(k) for k in figures)
    print(f"{'figure'.ljust(width)}  {'median':>10}  {'min':>10}  {'max':>10}")
    for key, values in figures.items():
        print(
            f"{key.ljust(width)}  {statistics.median(values):>10,.2f}"
            f"  {min(values):>10,.2f}  {max(values):>10,.2f}"
        )
    return 0


SCENARIOS = ("latency", "fanout", "idle", "claim", "requests")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1 round, smaller counts")
    parser.add_argument("--database-url")
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=SCENARIOS)
    parser.add_argument("--latency-count", type=int, help="hello instances (3 events each)")
    parser.add_argument("--subscribers", type=int, nargs="+", default=[1, 100, 1000])
    parser.add_argument(
        "--deliveries", type=int, help="frames per fan-out case (events = this / subscribers)"
    )
    parser.add_argument("--idle-seconds", type=float, help="idle measurement window")
    parser.add_argument("--finished-rows", type=int, help="completed instances for the claim")
    parser.add_argument("--claim-count", type=int, help="timed claims per table and round")
    parser.add_argument("--request-count", type=int, help="HTTP requests per kind and round")
    parser.add_argument(
        "--profile-server",
        type=Path,
        help="cProfile the server of the largest fan-out case in the last round to this file",
    )
    args = parser.parse_args(argv)
    quick = args.quick
    if quick:
        args.rounds = 1
    defaults = {
        "latency_count": (100, 200),
        "deliveries": (30_000, 100_000),
        "idle_seconds": (20.0, 60.0),
        "finished_rows": (200_000, 1_000_000),
        "claim_count": (100, 200),
        "request_count": (500, 3000),
    }
    for key, (quick_value, full_value) in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, quick_value if quick else full_value)
    if args.rounds < 1 or min(args.subscribers) < 1:
        parser.error("--rounds and --subscribers must be positive")
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse(sys.argv[1:]))))
