"""Side-by-side job benchmark: Laneway against PgQueuer, Procrastinate and DBOS Transact.

Run with `make bench` (it builds bench/.venv with the pinned peers first), or
`.venv/bin/python bench/compare.py [--rounds 3] [--count 10000] [--samples 200]
[--contestants laneway-1 pgqueuer ...] [--markdown [docs/performance.md]]`.

One PostgreSQL for everyone: DATABASE_URL (or --database-url) when set, else a throwaway
embedded server with its own durable settings (fsync and synchronous_commit as the server
has them: nothing is tuned for speed). Every contestant is a runner script in
bench/runners/ (see common.py there for exactly how each phase is timed), started as a
fresh process per phase: Laneway's with this interpreter (.venv), the peers' with
bench/.venv's. Every contestant gets fresh databases on that one server. Rounds are
interleaved (each round runs every contestant once, in an order rotated per round).

Per round and contestant:

  (b) processing: a fresh database, the system's schema, --count no-op jobs enqueued, then
      a worker runs them all: jobs/s from the first handler start to the moment all are
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
      more database for the batch figure.

Output: one table (medians over rounds, min–max, and the ratio of each median to the best
peer's median for that figure) on stdout; `--markdown` also writes it, with the date, the
machine and the exact command, into docs/performance.md between its bench/compare.py
markers. Progress goes to stderr. Not part of `make test`.
"""

import argparse
import asyncio
import contextlib
import datetime
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from laneway.store.databases import create_database, drop_database, throwaway_server  # noqa: E402

RUNNERS = ROOT / "bench" / "runners"
PEERS_PYTHON = ROOT / "bench" / ".venv" / "bin" / "python"
DOC = ROOT / "docs" / "performance.md"
BEGIN, END = "<!-- bench/compare.py: begin -->", "<!-- bench/compare.py: end -->"
PEER_PACKAGES = ("pgqueuer", "procrastinate", "dbos", "asyncpg", "psycopg", "sqlalchemy")


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

    @property
    def peer(self) -> bool:
        return SYSTEMS[self.system].peer


CONTESTANTS = {
    c.key: c
    for c in (
        Contestant("laneway-1", "Laneway 1-step", "laneway", "one-step"),
        Contestant("laneway-3", "Laneway 3-step", "laneway", "three-step"),
        Contestant("laneway-template", "Laneway template, 3 operations", "laneway", "template"),
        Contestant("pgqueuer", "PgQueuer defaults", "pgqueuer", "defaults"),
        Contestant("pgqueuer-c100", "PgQueuer max_concurrent_tasks=100", "pgqueuer", "c100"),
        Contestant("procrastinate", "Procrastinate concurrency=100", "procrastinate", "c100"),
        Contestant(
            "procrastinate-c1",
            "Procrastinate defaults (concurrency=1)",
            "procrastinate",
            "defaults",
            default=False,
        ),
        Contestant("dbos-1", "DBOS 1-step", "dbos", "one-step"),
        Contestant("dbos-3", "DBOS 3-step", "dbos", "three-step"),
        Contestant(
            "dbos-1-wc100",
            "DBOS 1-step worker_concurrency=100",
            "dbos",
            "one-step-wc100",
            default=False,
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
    Figure("processed", "(b) processed, first start to last completion", "jobs/s", True, 0),
    Figure("p50", "(c) idle enqueue→start p50", "ms", False, 1),
    Figure("p95", "(c) idle enqueue→start p95", "ms", False, 1),
    Figure("p99", "(c) idle enqueue→start p99", "ms", False, 1),
    Figure("commits", "(d) database commits per instance, processing", "commits", False, 2),
]
SYSTEM_FIGURES = {"enqueue_one", "enqueue_batch"}


@dataclass(slots=True)
class Results:
    """Per figure, per row (a contestant, or a system for the enqueue figures): the rounds."""

    values: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    busy: dict[str, list[int]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

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
        str(options.count),
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
    results: Results,
) -> str:
    """Processing, commits and latency of one contestant (and its system's enqueue rates
    where this contestant carries them); a progress line."""
    system = SYSTEMS[contestant.system]
    notes: list[str] = []
    async with server.database(contestant.key) as (name, url):
        phase, figure = fill
        answer = await run_phase(options, contestant, phase, url, setup=True)
        if figure is not None:
            rate = options.count / number(answer, "seconds")
            results.add(figure, system.name, rate)
            notes.append(f"{phase} {rate:,.0f}/s")
        await server.settle(name)
        before = await server.commits(name)
        answer = await run_phase(options, contestant, "process", url, setup=False)
        await server.settle(name)
        after = await server.commits(name)
    processed = options.count / number(answer, "seconds")
    commits = (after - before - number(answer, "monitor_transactions")) / options.count
    results.add("processed", contestant.label, processed)
    results.add("commits", contestant.label, commits)
    notes += [f"processed {processed:,.0f}/s", f"commits/instance {commits:.2f}"]
    if extra_batch:
        async with server.database(contestant.key) as (_, url):
            answer = await run_phase(options, contestant, "enqueue-batch", url, setup=True)
        rate = options.count / number(answer, "seconds")
        results.add("enqueue_batch", system.name, rate)
        notes.append(f"enqueue-batch {rate:,.0f}/s")
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


async def bench(server_url: str, args: argparse.Namespace, options: Options) -> Results:
    selected = [CONTESTANTS[key] for key in CONTESTANTS if key in args.contestants]
    plan = fills(selected)
    lonely = {c.system for c in selected if sum(o.system == c.system for o in selected) == 1}
    results = Results()
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


# -- machine and versions -------------------------------------------------------------------------


async def server_facts(url: str, given: bool) -> dict[str, str]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT name, setting, unit FROM pg_settings WHERE name IN"
            " ('server_version', 'fsync', 'synchronous_commit', 'full_page_writes',"
            " 'shared_buffers', 'max_connections', 'wal_level')"
        )
    finally:
        await conn.close()
    facts = {row["name"]: row["setting"] for row in rows}
    buffers = int(facts.get("shared_buffers", "0")) * 8 // 1024  # 8 kB pages
    facts["shared_buffers"] = f"{buffers} MB"
    facts["where"] = "DATABASE_URL" if given else "embedded (laneway.store.databases, tune=False)"
    return facts


def machine() -> dict[str, str]:
    memory = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    cpu = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": str(len(os.sched_getaffinity(0))),
        "cpu": cpu,
        "memory": memory,
        "python": platform.python_version(),
        "os": platform.platform(terse=True),
    }


def versions(peers_python: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    with contextlib.suppress(OSError, subprocess.SubprocessError, ValueError):
        script = (
            "import importlib.metadata as m, json, sys;"
            "print(json.dumps({p: m.version(p) for p in sys.argv[1:]}))"
        )
        output = subprocess.run(
            [str(peers_python), "-c", script, *PEER_PACKAGES],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        found.update(json.loads(output))
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        found["laneway"] = head + (" + uncommitted changes" if dirty else "")
    return found


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


def targets(results: Results) -> list[str]:
    """The issue #6 targets that this run measures, from the medians."""
    lines = []

    def ratio(figure: str, ours: str, theirs: str, goal: float, what: str) -> None:
        a, b = median_of(results, figure, ours), median_of(results, figure, theirs)
        if a is not None and b:
            verdict = "met" if a / b >= goal else "missed"
            lines.append(f"{what}: {a / b:.2f}× (target ≥ {goal:g}×, {verdict})")

    def bound(figure: str, label: str, goal: float, what: str, above: bool) -> None:
        value = median_of(results, figure, label)
        if value is not None:
            ok = value >= goal if above else value <= goal
            sign = "≥" if above else "≤"
            verdict = "met" if ok else "missed"
            lines.append(f"{what}: {value:,.1f} (target {sign} {goal:,g}, {verdict})")

    one, three = CONTESTANTS["laneway-1"].label, CONTESTANTS["laneway-3"].label
    ratio("processed", one, CONTESTANTS["pgqueuer"].label, 1.5, "1-step processed ÷ PgQueuer")
    ratio("processed", one, CONTESTANTS["dbos-1"].label, 20, "1-step processed ÷ DBOS 1-step")
    ratio("processed", three, CONTESTANTS["dbos-3"].label, 30, "3-step processed ÷ DBOS 3-step")
    ratio("enqueue_one", "Laneway", "PgQueuer", 1, "enqueue one by one ÷ PgQueuer")
    bound("enqueue_batch", "Laneway", 10_000, "batch enqueue, instances/s", above=True)
    bound("p50", one, 5, "idle enqueue→start p50, ms", above=False)
    bound("p99", one, 20, "idle enqueue→start p99, ms", above=False)
    return lines


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
    sizes = (
        f"{args.rounds} rounds, {args.count:,} jobs per processing run, "
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
    extra += [f"Failed: {failure.splitlines()[0]}" for failure in results.failures]
    goals = targets(results)
    text = "\n".join(
        [
            f"{date}; {box}",
            setup,
            f"Laneway {found.get('laneway', '?')}; {peer_versions}",
            sizes,
            "",
            text_table(results),
            "",
            *(["Issue #6 targets (from the medians):", *[f"  {g}" for g in goals], ""]),
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
            *(["Issue #6 targets, from these medians:", "", *[f"- {g}" for g in goals], ""]),
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
        facts = asyncio.run(server_facts(url, bool(given)))
        log(
            f"PostgreSQL {facts.get('server_version')}, fsync={facts.get('fsync')},"
            f" synchronous_commit={facts.get('synchronous_commit')}; contestants:"
            f" {', '.join(args.contestants)}"
        )
        results = asyncio.run(bench(url, args, options))
    minutes = (time.monotonic() - started) / 60
    command = shlex.join(
        [Path(sys.executable).relative_to(ROOT).as_posix(), "bench/compare.py", *argv]
        if Path(sys.executable).is_relative_to(ROOT)
        else [sys.executable, "bench/compare.py", *argv]
    )
    text, markdown = report(
        results, args, facts, machine(), versions(args.peers_python), command, minutes
    )
    print(text)
    if args.markdown is not None:
        write_markdown(args.markdown, markdown)
        log(f"wrote {args.markdown}")
    return 1 if results.failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
