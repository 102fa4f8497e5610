"""Side-by-side job benchmark: Laneway against PgQueuer, Procrastinate and DBOS Transact.

Run with `make bench` (it builds bench/.venv with the pinned peers first), or
`.venv/bin/python bench/compare.py [--rounds 3] [--count 10000] [--samples 200]
[--contestants laneway-1 pgqueuer ...] [--markdown [docs/performance.md]]`.

The defaults (3 rounds of 11 contestants, 10,000 jobs, 200 latency samples) take an
estimated 15 minutes on the 2-core reference machine with nothing else running (from the
rates of the last full run and smoke runs' fixed costs): about 20 s per
contestant and round for Laneway's and PgQueuer's (10 s of it the latency samples), DBOS
1-step about 50 s (its runs take at most DBOS_COUNT, 3,000, jobs: it processes ~100/s), and
DBOS 3-step (not a default; add it with --contestants) about 3 minutes more.

Contestants: Laneway's handler maps of 1 and 3 steps uncapped (Settings() defaults, queue
concurrency 100) and on a queue of concurrency 10 (-c10, the shape of a lane), and two
template shapes (3 stages × 1 operation, 1 stage of 3 parallel operations); PgQueuer as it
comes, with max_concurrent_tasks=10 (batch_size 5) and with 100; Procrastinate; DBOS.

One PostgreSQL for everyone: DATABASE_URL (or --database-url) when set, else a throwaway
embedded server with its own durable settings (fsync and synchronous_commit as the server
has them: nothing is tuned for speed). Every contestant is a runner script in
bench/runners/ (see common.py there for exactly how each phase is timed), started as a
fresh process per phase: Laneway's with this interpreter (.venv), the peers' with
bench/.venv's. Every contestant gets fresh databases on that one server. Rounds are
interleaved (each round runs every contestant once, in an order rotated per round).

Per round and contestant:

  (b) processing: a fresh database, the system's schema, --count no-op jobs enqueued, a
      CHECKPOINT (every contestant's worker starts with no dirty pages), then a worker runs
      them all: jobs/s from the first handler start to the moment all are
      completed in the database. (d) commits per instance: pg_stat_database.xact_commit
      of that database after minus before the worker process (read once all its
      connections are gone, so its statistics are flushed), less the completion
      monitor's own statements, divided by --count.
  (c) latency: another fresh database, an idle worker, --samples single enqueues from a
      separate client, p50/p95/p99 of enqueue call → first line of the handler, in ms.
  (a) enqueue rates are per system, not per workflow shape (a 1-step and a 3-step
      workflow are enqueued alike): the jobs of the system's first contestant are
      enqueued one call at a time and timed; those of its second with the batch API
      (1000 per call) and timed; a system with a single contestant in the run gets one
      more database for the batch figure. Laneway's batch contestant (or its only one)
      also takes, in one more database, the rate of GraphQL `enqueueWorkflows` mutations of
      1000 over HTTP to the real service (runners/graphql_enqueue.py); "missing" while
      schema.graphql has no such mutation.

After the rounds, on the same server: the retention run (bench/retention.py, --retention-events
events of finished instances past the limit, 10,000,000 by default; 0 skips it and the
targets table reads the last result left in bench/results/retention.json).

Output: one table (medians over rounds, min–max, and the ratio of each median to the best
peer's median for that figure) and issue #22's targets table (bench/targets.py: each ratio
of this run's medians, its target, met or not; "not measured" where a figure is missing) on
stdout; `--markdown` also writes both, with the date, the machine and the exact command,
into docs/performance.md between its bench/compare.py markers. Progress goes to stderr. Not
part of `make test`.
"""

import argparse
import asyncio
import contextlib
import datetime
import json
import math
import os
import shlex
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import retention  # noqa: E402
import run_facts  # noqa: E402
import tables  # noqa: E402
import targets  # noqa: E402

from laneway.store.databases import create_database, drop_database, throwaway_server  # noqa: E402

RUNNERS = ROOT / "bench" / "runners"
PEERS_PYTHON = ROOT / "bench" / ".venv" / "bin" / "python"
DOC = ROOT / "docs" / "performance.md"
BEGIN, END = "<!-- bench/compare.py: begin -->", "<!-- bench/compare.py: end -->"


@dataclass(frozen=True, slots=True)
class System:
    key: str
    name: str
    runner: str
    peer: bool


SYSTEMS = {
    s.key: s
    for s in (
        System("laneway", "Laneway", "laneway_runner.py", peer=False),
        System("pgqueuer", "PgQueuer", "pgqueuer_runner.py", peer=True),
        System("procrastinate", "Procrastinate", "procrastinate_runner.py", peer=True),
        System("dbos", "DBOS Transact", "dbos_runner.py", peer=True),
    )
}


@dataclass(frozen=True, slots=True)
class Contestant:
    key: str
    label: str
    system: str
    variant: str
    default: bool = True
    # At most this many jobs a run (None: --count). DBOS runs ~100 jobs/s here: 3,000 of
    # them measure its rates as well as 10,000, in a third of the time (the default run kept
    # under 20 minutes on a slow hour of the shared box).
    max_count: int | None = None

    @property
    def peer(self) -> bool:
        return SYSTEMS[self.system].peer

    def jobs(self, count: int) -> int:
        """The jobs of each of this contestant's runs, given --count."""
        return min(count, self.max_count or count)


DBOS_COUNT = 3_000  # jobs per DBOS run (see Contestant.max_count)
CONTESTANTS = {
    c.key: c
    for c in (
        Contestant("laneway-1", "Laneway 1-step", "laneway", "one-step"),
        Contestant("laneway-3", "Laneway 3-step", "laneway", "three-step"),
        Contestant(
            "laneway-1-c10", "Laneway 1-step, queue concurrency 10", "laneway", "one-step-c10"
        ),
        Contestant(
            "laneway-3-c10", "Laneway 3-step, queue concurrency 10", "laneway", "three-step-c10"
        ),
        Contestant(
            "laneway-template-3x1",
            "Laneway template, 3 stages × 1 operation",
            "laneway",
            "template-3x1",
        ),
        Contestant(
            "laneway-template-par3",
            "Laneway template, 1 stage of 3 parallel operations",
            "laneway",
            "template-par3",
        ),
        Contestant("pgqueuer", "PgQueuer defaults", "pgqueuer", "defaults"),
        Contestant(
            "pgqueuer-c10", "PgQueuer max_concurrent_tasks=10, batch_size=5", "pgqueuer", "c10"
        ),
        Contestant("pgqueuer-c100", "PgQueuer max_concurrent_tasks=100", "pgqueuer", "c100"),
        Contestant("procrastinate", "Procrastinate concurrency=100", "procrastinate", "c100"),
        Contestant(
            "procrastinate-c1",
            "Procrastinate defaults (concurrency=1)",
            "procrastinate",
            "defaults",
            default=False,
        ),
        Contestant("dbos-1", "DBOS 1-step", "dbos", "one-step", max_count=DBOS_COUNT),
        # 8 of a default run's minutes by itself; the targets do not compare it.
        Contestant(
            "dbos-3", "DBOS 3-step", "dbos", "three-step", default=False, max_count=DBOS_COUNT
        ),
        Contestant(
            "dbos-1-wc100",
            "DBOS 1-step worker_concurrency=100",
            "dbos",
            "one-step-wc100",
            default=False,
            max_count=DBOS_COUNT,
        ),
    )
}


@dataclass(frozen=True, slots=True)
class Figure:
    key: str
    title: str
    unit: str
    higher_is_better: bool
    decimals: int


FIGURES = [
    Figure("enqueue_one", "(a) enqueue one call at a time", "jobs/s", True, 0),
    Figure("enqueue_batch", "(a) enqueue with the batch API, 1000 a call", "jobs/s", True, 0),
    Figure(
        "enqueue_graphql",
        "(a) enqueue over HTTP, GraphQL enqueueWorkflows of 1000",
        "jobs/s",
        True,
        0,
    ),
    Figure("processed", "(b) processed, first start to last completion", "jobs/s", True, 0),
    Figure("p50", "(c) idle enqueue→start p50", "ms", False, 1),
    Figure("p95", "(c) idle enqueue→start p95", "ms", False, 1),
    Figure("p99", "(c) idle enqueue→start p99", "ms", False, 1),
    Figure("commits", "(d) database commits per instance, processing", "commits", False, 2),
]
SYSTEM_FIGURES = {"enqueue_one", "enqueue_batch", "enqueue_graphql"}


@dataclass(slots=True)
class Results:
    """Per figure, per row (a contestant, or a system for the enqueue figures): the rounds."""

    values: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    busy: dict[str, list[int]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)
    """Figures that cannot be taken in this tree at all (figure key: why)."""

    def add(self, figure: str, row: str, value: float) -> None:
        self.values.setdefault(figure, {}).setdefault(row, []).append(value)


def percentile(samples: list[float], p: float) -> float:
    """Nearest-rank percentile of `samples` (0 < p <= 100)."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def log(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


# -- running runners ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Options:
    count: int
    samples: int
    spacing_ms: float
    deadline: float
    peers_python: Path


async def run_phase(
    options: Options, contestant: Contestant, phase: str, database_url: str, *, setup: bool
) -> dict[str, object]:
    """Run one phase of `contestant` in a fresh process (with `setup`, installing its schema
    first, untimed); its JSON answer.

    Raises:
        RuntimeError: the runner failed, or ran past the phase deadline (it is then killed).
    """
    system = SYSTEMS[contestant.system]
    python = str(options.peers_python) if system.peer else sys.executable
    command = [
        python,
        str(RUNNERS / system.runner),
        phase,
        "--database-url",
        database_url,
        "--variant",
        contestant.variant,
        "--count",
        str(contestant.jobs(options.count)),
        "--samples",
        str(options.samples),
        "--spacing-ms",
        str(options.spacing_ms),
        "--deadline",
        str(options.deadline),
        *(["--setup"] if setup else []),
    ]
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    process = await asyncio.create_subprocess_exec(
        *command,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    try:
        async with asyncio.timeout(options.deadline + 120):
            stdout, stderr = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise RuntimeError(f"{contestant.key} {phase}: killed after the deadline") from None
    lines = stdout.decode().strip().splitlines()
    if process.returncode != 0 or not lines:
        tail = "\n".join(stderr.decode().strip().splitlines()[-15:])
        raise RuntimeError(f"{contestant.key} {phase}: exit {process.returncode}\n{tail}")
    answer: dict[str, object] = json.loads(lines[-1])
    return answer


# -- the database server --------------------------------------------------------------------------


class Server:
    """The one PostgreSQL server: fresh databases, their commit counters."""

    def __init__(self, url: str, admin: asyncpg.Connection) -> None:
        self.url = url
        self.admin = admin
        self.checkpoints = True

    @contextlib.asynccontextmanager
    async def database(self, label: str) -> AsyncIterator[tuple[str, str]]:
        name = f"cmp_{label.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
        url = await create_database(self.url, name)
        try:
            yield name, url
        finally:
            await drop_database(self.url, name)

    async def settle(self, name: str, deadline: float = 30.0) -> None:
        """Wait until no session is connected to `name`: a backend flushes its statistics
        (pg_stat_database) as it exits, before it leaves pg_stat_activity."""
        waited = time.monotonic() + deadline
        while time.monotonic() < waited:
            sessions = await self.admin.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", name
            )
            if sessions == 0:
                return
            await asyncio.sleep(0.05)
        log(f"  warning: sessions still connected to {name} after {deadline:.0f} s")

    async def checkpoint(self) -> None:
        """Write every dirty page out before a timed phase, so that none of them starts in the
        middle of a checkpoint, nor with pages a checkpoint left clean and the next change of
        each writes whole to the WAL (full_page_writes): every contestant's phase starts alike.
        A role that may not (not a superuser, no pg_checkpoint) goes on without."""
        if self.checkpoints:
            try:
                await self.admin.execute("CHECKPOINT")
            except asyncpg.InsufficientPrivilegeError as exc:
                self.checkpoints = False
                log(f"  warning: no CHECKPOINT before timed phases ({exc})")

    async def commits(self, name: str) -> int:
        value = await self.admin.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = $1", name
        )
        return int(value)


# -- one round ------------------------------------------------------------------------------------


def fills(selected: list[Contestant]) -> dict[str, tuple[str, str | None]]:
    """How each contestant's jobs get enqueued, and which enqueue figure that times: per
    system, the first contestant's one call at a time, the second's with the batch API;
    any further ones' with the batch API, untimed."""
    plan: dict[str, tuple[str, str | None]] = {}
    seen: dict[str, int] = {}
    for contestant in selected:  # canonical order, whatever the round's order
        index = seen.get(contestant.system, 0)
        seen[contestant.system] = index + 1
        if index == 0:
            plan[contestant.key] = ("enqueue-one", "enqueue_one")
        else:
            plan[contestant.key] = ("enqueue-batch", "enqueue_batch" if index == 1 else None)
    return plan


def number(answer: dict[str, object], key: str) -> float:
    """A number from a runner's answer.

    Raises:
        ValueError: missing or not a number.
    """
    value = answer.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"runner answer has no number {key!r}: {answer!r}")
    return float(value)


async def contestant_round(
    server: Server,
    options: Options,
    contestant: Contestant,
    fill: tuple[str, str | None],
    extra_batch: bool,
    graphql: bool,
    results: Results,
) -> str:
    """Processing, commits and latency of one contestant (and its system's enqueue rates
    where this contestant carries them, the GraphQL one with `graphql`); a progress line."""
    system = SYSTEMS[contestant.system]
    notes: list[str] = []
    async with server.database(contestant.key) as (name, url):
        phase, figure = fill
        answer = await run_phase(options, contestant, phase, url, setup=True)
        if figure is not None:
            rate = contestant.jobs(options.count) / number(answer, "seconds")
            results.add(figure, system.name, rate)
            notes.append(f"{phase} {rate:,.0f}/s")
        await server.settle(name)
        await server.checkpoint()
        before = await server.commits(name)
        answer = await run_phase(options, contestant, "process", url, setup=False)
        await server.settle(name)
        after = await server.commits(name)
    count = contestant.jobs(options.count)
    processed = count / number(answer, "seconds")
    commits = (after - before - number(answer, "monitor_transactions")) / count
    results.add("processed", contestant.label, processed)
    results.add("commits", contestant.label, commits)
    notes += [f"processed {processed:,.0f}/s", f"commits/instance {commits:.2f}"]
    if extra_batch:
        async with server.database(contestant.key) as (_, url):
            answer = await run_phase(options, contestant, "enqueue-batch", url, setup=True)
        rate = count / number(answer, "seconds")
        results.add("enqueue_batch", system.name, rate)
        notes.append(f"enqueue-batch {rate:,.0f}/s")
    if graphql:
        notes.append(await graphql_round(server, options, contestant, results))
    async with server.database(contestant.key) as (_, url):
        answer = await run_phase(options, contestant, "latency", url, setup=True)
    raw = answer.get("ms")
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"runner answer has no latency samples: {answer!r}"[:300])
    samples = [float(ms) for ms in raw]
    for key, p in (("p50", 50), ("p95", 95), ("p99", 99)):
        results.add(key, contestant.label, percentile(samples, p))
    results.busy.setdefault(contestant.label, []).append(int(number(answer, "busy")))
    notes.append(f"p50 {percentile(samples, 50):.1f} ms, p99 {percentile(samples, 99):.1f} ms")
    return ", ".join(notes)


async def graphql_round(
    server: Server, options: Options, contestant: Contestant, results: Results
) -> str:
    """Laneway's enqueue rate over GraphQL in a database of its own; a progress note. A
    failure here is recorded and leaves the contestant's other figures standing."""
    system = SYSTEMS[contestant.system]
    try:
        async with server.database(contestant.key) as (_, url):
            answer = await run_phase(options, contestant, "enqueue-graphql", url, setup=True)
        why = answer.get("missing")
        if isinstance(why, str):
            results.missing["enqueue_graphql"] = f"the service has no enqueueWorkflows ({why})"
            return "enqueue-graphql missing"
        rate = contestant.jobs(options.count) / number(answer, "seconds")
    except (RuntimeError, TimeoutError, ValueError) as error:
        results.failures.append(f"{contestant.key} enqueue-graphql: {error}")
        return "enqueue-graphql FAILED"
    results.add("enqueue_graphql", system.name, rate)
    return f"enqueue-graphql {rate:,.0f}/s"


def graphql_carrier(
    selected: list[Contestant], plan: dict[str, tuple[str, str | None]], results: Results
) -> str | None:
    """The Laneway contestant whose rounds also take the GraphQL enqueue figure: the one that
    takes the batch figure (so the two are taken side by side), else the only one. None when
    no Laneway contestant runs, or when schema.graphql has no enqueueWorkflows yet (recorded
    as missing)."""
    ours = [c for c in selected if c.system == "laneway"]
    if not ours:
        return None
    schema = ROOT / "schema.graphql"
    if "enqueueWorkflows" not in (schema.read_text() if schema.exists() else ""):
        results.missing["enqueue_graphql"] = "enqueueWorkflows is not in schema.graphql yet"
        return None
    batch = [c.key for c in ours if plan[c.key][1] == "enqueue_batch"]
    return batch[0] if batch else ours[0].key


async def bench(server_url: str, args: argparse.Namespace, options: Options) -> Results:
    selected = [CONTESTANTS[key] for key in CONTESTANTS if key in args.contestants]
    plan = fills(selected)
    lonely = {c.system for c in selected if sum(o.system == c.system for o in selected) == 1}
    results = Results()
    carrier = graphql_carrier(selected, plan, results)
    admin = await asyncpg.connect(server_url)
    server = Server(server_url, admin)
    started = time.monotonic()
    try:
        for round_index in range(args.rounds):
            shift = round_index % len(selected)
            for contestant in selected[shift:] + selected[:shift]:
                began = time.monotonic()
                try:
                    line = await contestant_round(
                        server,
                        options,
                        contestant,
                        plan[contestant.key],
                        contestant.system in lonely,
                        contestant.key == carrier,
                        results,
                    )
                except (RuntimeError, TimeoutError, KeyError, ValueError) as error:
                    results.failures.append(f"round {round_index + 1} {contestant.key}: {error}")
                    line = f"FAILED: {error}"
                log(
                    f"[round {round_index + 1}/{args.rounds}] {contestant.key}: {line}"
                    f" ({time.monotonic() - began:.0f} s; {time.monotonic() - started:.0f} s"
                    " in all)"
                )
    finally:
        await admin.close()
    return results


# -- the table ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Row:
    figure: Figure
    label: str
    peer: bool
    median: float
    low: float
    high: float
    rounds: int
    ratio: float | None
    best_peer: bool


def is_peer_row(figure: Figure, label: str) -> bool:
    if figure.key in SYSTEM_FIGURES:
        return any(s.name == label and s.peer for s in SYSTEMS.values())
    return any(c.label == label and c.peer for c in CONTESTANTS.values())


def rows(results: Results) -> Iterator[Row]:
    for figure in FIGURES:
        by_row = results.values.get(figure.key, {})
        medians = {label: statistics.median(values) for label, values in by_row.items()}
        peers = {label: m for label, m in medians.items() if is_peer_row(figure, label)}
        best = None
        if peers:
            choose = max if figure.higher_is_better else min
            best = choose(peers, key=lambda label: peers[label])
        for label, values in by_row.items():
            ratio = None
            if best is not None and peers[best] != 0:
                ratio = medians[label] / peers[best]
            yield Row(
                figure=figure,
                label=label,
                peer=is_peer_row(figure, label),
                median=medians[label],
                low=min(values),
                high=max(values),
                rounds=len(values),
                ratio=ratio,
                best_peer=label == best,
            )


def fmt(value: float, decimals: int) -> str:
    return f"{value:,.{decimals}f}"


def cells(row: Row) -> list[str]:
    d = row.figure.decimals
    ratio = "" if row.ratio is None else f"{row.ratio:.2f}×"
    if row.best_peer:
        ratio += " (best peer)"
    return [
        f"{row.figure.title}, {row.figure.unit}",
        row.label,
        fmt(row.median, d),
        f"{fmt(row.low, d)}–{fmt(row.high, d)}",
        ratio,
        str(row.rounds),
    ]


HEADER = ["figure", "contestant", "median", "min–max", "÷ best peer", "rounds"]


def text_table(results: Results) -> str:
    table = [cells(row) for row in rows(results)]
    widths = [max(len(line[i]) for line in [HEADER, *table]) for i in range(len(HEADER))]
    out = ["  ".join(h.ljust(w) for h, w in zip(HEADER, widths, strict=True))]
    previous = None
    for line in table:
        if previous is not None and line[0] != previous:
            out.append("")
        shown = [("" if line[0] == previous else line[0]), *line[1:]]
        out.append("  ".join(c.ljust(w) for c, w in zip(shown, widths, strict=True)).rstrip())
        previous = line[0]
    return "\n".join(out)


def markdown_table(results: Results) -> str:
    out = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    previous = None
    for row in rows(results):
        line = cells(row)
        if line[0] == previous:
            line[0] = ""
        else:
            previous = line[0]
        out.append("| " + " | ".join(line) + " |")
    return "\n".join(out)


def median_of(results: Results, figure: str, label: str) -> float | None:
    values = results.values.get(figure, {}).get(label)
    return statistics.median(values) if values else None


def target_table(results: Results, retention: Path, markdown: bool) -> str:
    """Issue #22's targets from this run's medians (bench/targets.py)."""

    def label(key: str) -> str:
        return CONTESTANTS[key].label if key in CONTESTANTS else key

    lines = targets.target_rows(
        lambda figure, row: median_of(results, figure, row), label, results.missing, retention
    )
    return tables.render(targets.HEADER, lines, markdown, numbers=False)


def report(
    results: Results,
    args: argparse.Namespace,
    facts: dict[str, str],
    host: dict[str, str],
    found: dict[str, str],
    command: str,
    minutes: float,
) -> tuple[str, str]:
    """The plain-text report and the Markdown section."""
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    setup = (
        f"PostgreSQL {facts.get('server_version')} ({facts.get('where')}): "
        f"fsync={facts.get('fsync')}, synchronous_commit={facts.get('synchronous_commit')}, "
        f"full_page_writes={facts.get('full_page_writes')}, "
        f"shared_buffers={facts.get('shared_buffers')}"
    )
    box = (
        f"{host['nproc']} cores ({host['cpu']}), {host['memory']} memory, "
        f"Python {host['python']}, {host['os']}; PostgreSQL on the same machine"
    )
    fewer = sorted(
        {
            f"{SYSTEMS[c.system].name} {c.jobs(args.count):,}"
            for key in args.contestants
            if (c := CONTESTANTS[key]).jobs(args.count) < args.count
        }
    )
    sizes = (
        f"{args.rounds} rounds, {args.count:,} jobs per processing run"
        f"{' (' + ', '.join(fewer) + ')' if fewer else ''}, "
        f"{args.samples} latency samples {args.spacing_ms:g} ms apart (±50 %); "
        f"{minutes:.1f} minutes"
    )
    peer_versions = ", ".join(f"{k} {v}" for k, v in found.items() if k != "laneway")
    busy = [
        f"{label}: {statistics.median(values):.0f} of {args.samples}"
        for label, values in results.busy.items()
        if any(values)
    ]
    extra = []
    if busy:
        extra.append(
            "Latency arrivals that found an earlier job not yet finished (median per round): "
            + "; ".join(busy)
            + "."
        )
    titles = {figure.key: figure.title for figure in FIGURES}
    extra += [f"Not taken: {titles[key]}: {why}." for key, why in results.missing.items()]
    extra += [f"Failed: {failure.splitlines()[0]}" for failure in results.failures]
    text = "\n".join(
        [
            f"{date}; {box}",
            setup,
            f"Laneway {found.get('laneway', '?')}; {peer_versions}",
            sizes,
            "",
            text_table(results),
            "",
            "Issue #22 targets (ratios of this run's medians):",
            target_table(results, args.retention_result, markdown=False),
            "",
            *extra,
        ]
    )
    markdown = "\n".join(
        [
            BEGIN,
            f"Measured {date} with `{command}`.",
            "",
            f"- Machine: {box}. The machine is shared with other work (other sessions'"
            " builds and tests may run at the same time), so treat single figures as"
            " ±10–20 % and compare ratios within one run.",
            f"- {setup}.",
            f"- Laneway {found.get('laneway', '?')}; peers: {peer_versions}.",
            f"- Sizes: {sizes}.",
            "",
            "Medians over the rounds, min–max over the rounds, and each median divided by"
            " the best peer's median for that figure (higher is better for jobs/s, lower"
            " for ms and commits).",
            "",
            markdown_table(results),
            "",
            "Issue #22 targets, ratios of these medians:",
            "",
            target_table(results, args.retention_result, markdown=True),
            "",
            *[f"{line}\n" for line in extra],
            END,
        ]
    )
    return text, markdown


def write_markdown(path: Path, section: str) -> None:
    """Replace the bench/compare.py section of `path` (append it if missing)."""
    if path.exists():
        text = path.read_text()
        if BEGIN in text and END in text:
            head, rest = text.split(BEGIN, 1)
            tail = rest.split(END, 1)[1]
            path.write_text(head + section + tail)
            return
        path.write_text(text.rstrip() + "\n\n" + section + "\n")
        return
    path.write_text(
        "# Performance\n\nSide-by-side job benchmark (`make bench`, bench/compare.py).\n\n"
        + section
        + "\n"
    )


# -- entry point ----------------------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, default=10_000, help="jobs per processing run")
    parser.add_argument("--samples", type=int, default=200, help="latency samples")
    parser.add_argument("--spacing-ms", type=float, default=50.0, help="between latency jobs")
    parser.add_argument(
        "--contestants",
        nargs="+",
        choices=list(CONTESTANTS),
        default=[key for key, c in CONTESTANTS.items() if c.default],
    )
    parser.add_argument("--database-url", help="default: DATABASE_URL, else embedded")
    parser.add_argument("--deadline", type=float, default=900.0, help="seconds per phase")
    parser.add_argument("--peers-python", type=Path, default=PEERS_PYTHON)
    parser.add_argument(
        "--retention-result",
        type=Path,
        default=targets.RETENTION_RESULT,
        help="the retention bench's JSON result, written by the retention run, read for the"
        " targets table",
    )
    parser.add_argument(
        "--retention-events",
        type=int,
        default=retention.DEFAULT_EVENTS,
        help="events in the retention run (0: no run, read the last result)",
    )
    parser.add_argument(
        "--markdown",
        nargs="?",
        type=Path,
        const=DOC,
        help=f"also write the section in this file (default {DOC.relative_to(ROOT)})",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.count < 1 or args.samples < 1:
        parser.error("--rounds, --count and --samples must be positive")
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    if any(CONTESTANTS[key].peer for key in args.contestants) and not args.peers_python.exists():
        log(f"{args.peers_python} is missing: run `make bench-peers` (or `make bench`)")
        return 2
    options = Options(
        count=args.count,
        samples=args.samples,
        spacing_ms=args.spacing_ms,
        deadline=args.deadline,
        peers_python=args.peers_python,
    )
    given = args.database_url or os.environ.get("DATABASE_URL")
    started = time.monotonic()
    # Durable settings as the server has them: honest figures, not a tuned throwaway.
    with throwaway_server(given, tune=False) as url:
        facts = asyncio.run(run_facts.server_facts(url, bool(given)))
        log(
            f"PostgreSQL {facts.get('server_version')}, fsync={facts.get('fsync')},"
            f" synchronous_commit={facts.get('synchronous_commit')}; contestants:"
            f" {', '.join(args.contestants)}"
        )
        results = asyncio.run(bench(url, args, options))
        if args.retention_events > 0:
            log(f"retention: {args.retention_events:,} events")
            try:
                retention.run(url, args.retention_events, args.retention_result)
            except Exception as exc:  # the table then says why the row is missing
                results.failures.append(f"retention: {type(exc).__name__}: {exc}")
                args.retention_result.unlink(missing_ok=True)
    minutes = (time.monotonic() - started) / 60
    command = shlex.join(
        [Path(sys.executable).relative_to(ROOT).as_posix(), "bench/compare.py", *argv]
        if Path(sys.executable).is_relative_to(ROOT)
        else [sys.executable, "bench/compare.py", *argv]
    )
    text, markdown = report(
        results,
        args,
        facts,
        run_facts.machine(),
        run_facts.versions(args.peers_python),
        command,
        minutes,
    )
    print(text)
    if args.markdown is not None:
        write_markdown(args.markdown, markdown)
        log(f"wrote {args.markdown}")
    return 1 if results.failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
