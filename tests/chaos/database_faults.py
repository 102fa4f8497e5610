"""Database fault scenarios (P-01, P-02, P-05 in docs/reliability.md): restarts, outages, timeouts.

Owns placing each database fault by progress (so many instances completed), measuring how
long workers take to resume, and the checks beyond the checker's invariants. P-01 and P-02
need a server of their own (tests/chaos/postgres.py); P-05 runs on any.
"""

import asyncio
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import asyncpg

from tests.chaos.harness import ChaosRun, Outcome, RunConfig, chaos_run
from tests.chaos.postgres import PostgresControl
from tests.engine.helpers import eventually

RESUME_BOUND_SECONDS = 5.0


async def first_claim_after(run: ChaosRun, moment: datetime) -> float:
    """Seconds from `moment` to the first claim any worker made after it."""
    rows = await run.fetch(
        "SELECT min(at) AS at FROM chaos.audit"
        " WHERE old_status = 'pending' AND new_status = 'running' AND at > $1",
        moment,
    )
    return float((rows[0]["at"] - moment).total_seconds())


async def _fault(run: ChaosRun, pg: PostgresControl, action: str) -> datetime:
    """`restart:fast`, `restart:immediate` or `stop:<seconds>`; when the server was back."""
    kind, _, argument = action.partition(":")
    async with run.outage():
        if kind == "restart":
            return await pg.restart(argument)
        await pg.stop("fast")
        await asyncio.sleep(float(argument))  # the outage's length is the fault itself
        return await pg.start()


async def p01_restarts(
    database_url: str,
    log_dir: Path,
    config: RunConfig,
    *,
    instances: int,
    rate_per_second: float,
    schedule: Sequence[tuple[int, str]],
    name: str = "P-01 restarts",
) -> Outcome:
    """Load `instances` W3; at each (completed count, action) of `schedule`, fault the server."""
    pg = await PostgresControl.of(database_url)
    back: list[datetime] = []
    async with chaos_run(database_url, config, log_dir) as run:
        async with asyncio.TaskGroup() as group:
            group.create_task(run.enqueue(instances, rate_per_second=rate_per_second))
            for progress, action in schedule:
                await run.wait_completed(progress, timeout=600)
                back.append(await _fault(run, pg, action))
        await run.wait_settled(timeout=config.reclaim_max_seconds + 180)
        resumes = [await first_claim_after(run, moment) for moment in back]
        verdict = await run.verdict()
    outcome = run.outcome(
        name,
        f"{len(run.enqueued)} W3; " + ", ".join(action for _, action in schedule),
        verdict,
        {
            "no worker died": run.supervisor.incidents("died") == [],
            f"resumed <= {RESUME_BOUND_SECONDS:g}s": max(resumes) <= RESUME_BOUND_SECONDS,
        },
        {"enqueue retries": str(run.enqueue_retries)},
    )
    outcome.resume_seconds = resumes
    return outcome


async def idle_holder_lifetime(run: ChaosRun) -> float:
    """Seconds the step's session stayed idle in transaction before the server ended it."""

    async def holder() -> list[asyncpg.Record]:
        return await run.fetch(
            "SELECT extract(epoch FROM clock_timestamp() - state_change) AS idle_s"
            " FROM pg_stat_activity WHERE application_name = 'chaos-step-holder'"
            " AND state = 'idle in transaction'"
        )

    first = await eventually(holder, bool, timeout=60)
    seen_at = time.monotonic()
    await eventually(holder, lambda rows: not rows, timeout=600)
    return float(first[0]["idle_s"]) + time.monotonic() - seen_at


async def p05_timeouts(
    database_url: str,
    log_dir: Path,
    config: RunConfig,
    *,
    statement_seconds: float,
    lock_seconds: float,
    expected_timeouts: str,
) -> Outcome:
    """Worker sessions carry the role timeouts; a step's idle transaction is ended by the server."""
    idle = config.idle_in_transaction_seconds
    timeouts = {
        "LANEWAY_STATEMENT_TIMEOUT": f"{statement_seconds:g}",
        "LANEWAY_LOCK_TIMEOUT": f"{lock_seconds:g}",
    }
    config = replace(config, worker_env={**config.worker_env, **timeouts})
    async with chaos_run(database_url, config, log_dir) as run:
        holder = await run.enqueue_one("holder", {"n": -1, "hold_tx_s": idle + 2})
        lifetime = await idle_holder_lifetime(run)
        await run.enqueue(20, rate_per_second=40)
        await run.wait_settled(timeout=config.reclaim_max_seconds + 120)
        verdict = await run.verdict()
        seen = await run.fetch(
            "SELECT DISTINCT timeouts FROM chaos.audit"
            " WHERE application_name LIKE 'laneway-worker-%'"
        )
        events = await run.engine.events(holder)
        ledger = await run.fetch(
            "SELECT step, attempt FROM chaos.ledger WHERE instance_id = $1 ORDER BY at", holder
        )
    failures = [e for e in events if e.type == "retrying"]
    return run.outcome(
        "P-05 role timeouts",
        f"statement/lock/idle-in-transaction {expected_timeouts}",
        verdict,
        {
            "every worker write under the timeouts": [r["timeouts"] for r in seen]
            == [expected_timeouts],
            "idle transaction ended at the timeout": lifetime <= idle + 0.5,
            "the attempt failed once and was retried": len(failures) == 1
            and (ledger[0]["step"], ledger[0]["attempt"]) == ("one", 2),
        },
        {"idle transaction ended after": f"{lifetime:.2f}s"},
    )
