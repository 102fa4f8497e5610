"""The full chaos tier: `python -m tests.chaos.full` (`make chaos`).

Runs the PR tier's scenarios (crashes.py, fault_points.py, database_faults.py) at the plan's
production engine parameters (lease 30 s, renewal every 10 s, poll and reaper tick 2 s,
idle-in-transaction timeout 60 s, 4 workers), with sizes chosen so the whole tier takes about
15-20 minutes on a 2-core box, on a private PostgreSQL with durable commits. Prints the sizes
first, a line per scenario as it ends, then one table. Exits 1 if any scenario failed.

`--only R-01,P-01` runs some scenarios; `--quick` runs them all at PR-tier sizes and fast
parameters (a smoke test of this script, not a measurement).
"""

import argparse
import asyncio
import os
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from laneway.store.databases import create_database
from tests.chaos import crashes, database_faults, fault_points
from tests.chaos.checker import Verdict
from tests.chaos.harness import Outcome, RunConfig
from tests.chaos.postgres import PostgresControl, private_server, server_version

PRODUCTION = RunConfig(
    workers=4, lease_seconds=30.0, poll_seconds=2.0, idle_in_transaction_seconds=60.0
)
FAST = RunConfig(workers=3, lease_seconds=2.0, poll_seconds=0.2, idle_in_transaction_seconds=1.5)

Run = Callable[[str, Path], Awaitable[Outcome]]


@dataclass(frozen=True, slots=True)
class Scenario:
    key: str
    plan: str  # the full-size target (instances, faults, engine parameters; docs/reliability.md)
    chosen: str  # what this run does instead, on this box
    run: Run


def scenarios(quick: bool) -> list[Scenario]:
    """Every scenario with its size: production values, or PR-tier ones with --quick."""
    config = FAST if quick else PRODUCTION

    def pick(small: Any, full: Any) -> Any:
        return small if quick else full

    kills, kill_gap, r01_min = pick(6, 100), pick(40, 100), pick(200, 10_000)
    stops, cuts, terms = pick(1, 20), pick(1, 10), pick(3, 20)
    kill_p = pick("0.1", "0.01")
    runner_specs = {
        0: f"before_step=kill@{kill_p}",
        1: f"after_checkpoint_commit=kill@{kill_p}",
        2: "after_checkpoint_commit=raise_conn_lost@0.05",
    }
    runner_min, poison_others = pick(60, 2000), pick(150, 1000)
    # R-06's others arrive over about as long as the poison takes to die four times (a lease
    # and a reboot each), so that its last deaths, run alone, have others around to take.
    poison_rate = pick(10, 8)
    p01_n, p02_n, p02_stop = pick(300, 10_000), pick(200, 1500), pick(4, 45)
    p01_schedule = pick(
        [(60, "restart:fast"), (150, "restart:immediate")],
        [(2000, "restart:fast"), (5000, "restart:immediate"), (8000, "stop:20")],
    )
    # keep their PR-tier leases in --quick: 30 s (a pick-up within a second can
    # only come from the release) and 3 s (time to boot a replacement between deaths).
    r04_config = RunConfig(lease_seconds=30.0) if quick else config
    r06_config = RunConfig(lease_seconds=3.0) if quick else config
    p05_config = RunConfig(workers=2, idle_in_transaction_seconds=1.0) if quick else config
    p05_expected = pick("7s/3s/1s", "30s/2s/1min")
    return [
        Scenario(
            "R-01",
            "10,000 W3 at 30/s, 4 workers, 100 SIGKILLs one every ~4 s",
            f">= {r01_min} W3 at 30/s, {kills} SIGKILLs, one per {kill_gap} completions",
            lambda url, logs: crashes.r01_kills(
                url,
                logs,
                config,
                kills=kills,
                progress_between_kills=kill_gap,
                rate_per_second=pick(40, 30),
                min_instances=r01_min,
            ),
        ),
        Scenario(
            "R-02",
            "SIGSTOP for lease + 15 s (45 s), 20 times",
            f"{stops} SIGSTOPs, each until every held lease was recovered (~lease + tick)",
            lambda url, logs: crashes.r02_zombies(
                url, logs, config, stops=stops, rate_per_second=pick(30, 20)
            ),
        ),
        Scenario(
            "R-03",
            "blackhole the worker's link for 45 s, 10 times",
            f"{cuts} blackholes, each until every held lease was recovered (~lease + tick)",
            lambda url, logs: crashes.r03_partitions(
                url, logs, config, partitions=cuts, rate_per_second=pick(30, 20)
            ),
        ),
        Scenario(
            "R-04",
            "SIGTERM under load, 20 times",
            f"{terms} SIGTERMs, 30 W3 with 0.3-0.9 s steps before each",
            lambda url, logs: crashes.r04_sigterms(url, logs, r04_config, terms=terms, batch=30),
        ),
        Scenario(
            "R-05 runner",
            "each point 20 iterations with kill; raise_conn_lost at 5 % over 2,000",
            f">= {runner_min} W3; one worker each armed with " + ", ".join(runner_specs.values()),
            lambda url, logs: fault_points.r05_runner_points(
                url, logs, config, specs=runner_specs, min_instances=runner_min
            ),
        ),
        Scenario(
            "R-05 release",
            "each point 20 iterations with kill",
            f"{pick(1, 3)} SIGTERMs of a worker armed with before_release=kill",
            lambda url, logs: fault_points.r05_release_point(url, logs, config, terms=pick(1, 3)),
        ),
        Scenario(
            "R-05 pause",
            "each point 20 iterations with kill",
            f"WP in batches of {pick(20, 30)} until pause_transition=kill@{pick(0.3, 0.2)} fired",
            lambda url, logs: fault_points.r05_pause_point(
                url, logs, config, probability=pick(0.3, 0.2), batch=pick(20, 30)
            ),
        ),
        Scenario(
            "R-05 cancel",
            "each point 20 iterations with kill",
            f"{pick(3, 5)} cancels by clients armed with cancel_transition=kill",
            lambda url, logs: fault_points.r05_cancel_point(
                url, logs, config, cancels=pick(3, 5), others=pick(20, 100)
            ),
        ),
        Scenario(
            "R-05 cron",
            "each point 20 iterations with kill",
            "an every-1s schedule fired by one worker armed with cron_insert=kill, 3 deaths",
            lambda url, logs: fault_points.r05_cron_point(url, logs, config),
        ),
        Scenario(
            "R-06",
            "1 poison + 1,000 W3, dead-lettered after 3 recoveries",
            f"1 poison + {poison_others} W3 at {poison_rate}/s (its four deaths' span), cap 3",
            lambda url, logs: crashes.r06_poison(
                url, logs, r06_config, others=poison_others, rate_per_second=poison_rate
            ),
        ),
        Scenario(
            "S-12",
            "workers at 100 % CPU (busy threads) for 2 min: 0 premature reclaims, lag < lease/3",
            f"{pick(20, 120)} s of W3 at {pick(2, 3)}/s, 8-16 s steps, 2 busy threads per worker",
            lambda url, logs: crashes.s12_busy_workers(
                url,
                logs,
                config,
                seconds=pick(20, 120),
                busy_threads=2,
                rate_per_second=pick(2, 3),
            ),
        ),
        Scenario(
            "P-01",
            "10,000 W3 at 30/s; restart fast, immediate; stop 20 s",
            f"{p01_n} W3 at 30/s; " + ", ".join(f"{a} at {n} done" for n, a in p01_schedule),
            lambda url, logs: database_faults.p01_restarts(
                url, logs, config, instances=p01_n, rate_per_second=30, schedule=p01_schedule
            ),
        ),
        Scenario(
            "P-02",
            "stop PostgreSQL 45 s (longer than the lease) under load",
            f"{p02_n} W3 at 30/s; stop {p02_stop} s",
            lambda url, logs: database_faults.p01_restarts(
                url,
                logs,
                config,
                instances=p02_n,
                rate_per_second=30,
                schedule=[(pick(60, 300), f"stop:{p02_stop}")],
                name="P-02 outage > lease",
            ),
        ),
        Scenario(
            "P-05",
            "timeouts non-zero; a transaction left idle is killed at 60 s",
            f"timeouts {p05_expected}; a step idles in a transaction until killed",
            lambda url, logs: database_faults.p05_timeouts(
                url,
                logs,
                p05_config,
                statement_seconds=pick(7, 30),
                lock_seconds=pick(3, 2),
                expected_timeouts=p05_expected,
            ),
        ),
    ]


# -- the table ----------------------------------------------------------------------------------


def _latency(verdict: Verdict) -> str:
    values = verdict.reclaim_seconds
    return f"{min(values):.1f} / {max(values):.1f}" if values else "-"


def row_of(outcome: Outcome, seconds: float) -> list[str]:
    v = outcome.verdict
    failed = [name for name, ok in outcome.checks.items() if not ok]
    notes = [f"{k}: {val}" for k, val in outcome.figures.items()]
    if v.wrong_result:
        notes.append(f"wrong result: {len(v.wrong_result)}")
    if v.premature or v.late:
        notes.append(f"premature/late reclaims: {len(v.premature)}/{len(v.late)}")
    if v.unjudged_late:
        notes.append(f"late while no worker was up (not judged): {v.unjudged_late}")
    if failed:
        notes.append("failed: " + "; ".join(failed))
    resume = f"{max(outcome.resume_seconds):.1f}s" if outcome.resume_seconds else "-"
    return [
        outcome.scenario,
        outcome.size,
        str(len(v.lost)),
        str(len(v.double_terminal)),
        str(len(v.stale_writes)),
        str(len(v.unexplained_duplicates)),
        _latency(v),
        resume,
        "pass" if outcome.passed else "FAIL",
        f"{seconds:.0f}s",
        "; ".join(notes),
    ]


HEADER = [
    "scenario",
    "size",
    "lost",
    "double-terminal",
    "stale",
    "unexplained dup",
    "reclaim min / max (s)",
    "resume",
    "result",
    "took",
    "notes",
]


def table(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


# -- running ------------------------------------------------------------------------------------


async def run_all(admin_url: str, chosen: list[Scenario], log_root: Path) -> int:
    version = await server_version(admin_url)
    print(f"machine: {os.cpu_count()} cores, {platform.machine()}, PostgreSQL {version}")
    control = await PostgresControl.of(admin_url)
    try:
        return await _run_each(admin_url, control, chosen, log_root)
    finally:
        # pg_ctl, not the embedded server's own clean-up: after a restart its handle is stale.
        await control.stop()


async def _run_each(
    admin_url: str, control: PostgresControl, chosen: list[Scenario], log_root: Path
) -> int:
    rows: list[list[str]] = []
    failures = 0
    for index, scenario in enumerate(chosen):
        database = f"chaos_{index}"
        url = await create_database(admin_url, database, migrate=True)
        started = time.monotonic()
        try:
            outcome = await scenario.run(url, log_root / database)
        except Exception:
            traceback.print_exc()
            failures += 1
            rows.append(
                [scenario.key, "-", "", "", "", "", "", "", "ERROR", "", "raised; see above"]
            )
            print(f"{scenario.key}: ERROR after {time.monotonic() - started:.0f}s", flush=True)
            await _ensure_running(admin_url, control)
            continue
        seconds = time.monotonic() - started
        rows.append(row_of(outcome, seconds))
        failures += not outcome.passed
        print(
            f"{scenario.key}: {'pass' if outcome.passed else 'FAIL'} in {seconds:.0f}s "
            f"- {outcome.verdict.summary()}",
            flush=True,
        )
        if not outcome.passed:
            print(outcome.explain(), flush=True)
    print()
    print(table(rows))
    return 1 if failures else 0


async def _ensure_running(admin_url: str, control: PostgresControl) -> None:
    """After a scenario that raised mid-outage, start the server again if it stays down."""
    for _ in range(60):
        try:
            await server_version(admin_url)
            return
        except (OSError, asyncpg.PostgresError):
            if not (control.data_dir / "postmaster.pid").exists():
                await control.start()
            await asyncio.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.full", description=__doc__)
    parser.add_argument("--only", help="comma-separated scenario keys (e.g. R-01,P-01)")
    parser.add_argument("--quick", action="store_true", help="PR-tier sizes (a smoke test)")
    args = parser.parse_args(argv)
    chosen = scenarios(args.quick)
    if args.only:
        keys = {key.strip() for key in args.only.split(",")}
        chosen = [s for s in chosen if s.key in keys or s.key.split()[0] in keys]
    config = FAST if args.quick else PRODUCTION
    print(
        f"engine: {config.workers} workers, lease {config.lease_seconds:g}s (renewed every "
        f"{config.lease_seconds / 3:g}s), poll and reaper tick {config.poll_seconds:g}s, "
        f"RECLAIM_MAX {config.reclaim_max_seconds:g}s",
        flush=True,
    )
    print("scenarios (plan -> chosen here):", flush=True)
    for scenario in chosen:
        print(f"  {scenario.key}: {scenario.plan} -> {scenario.chosen}", flush=True)
    log_root = Path(tempfile.mkdtemp(prefix="laneway-chaos-"))
    print(f"worker logs: {log_root}", flush=True)
    with private_server() as admin_url:
        return asyncio.run(run_all(admin_url, chosen, log_root))


if __name__ == "__main__":
    sys.exit(main())
