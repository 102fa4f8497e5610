"""Fault-point scenarios (R-05 in docs/reliability.md): workers, or an API-side client, armed with
LANEWAY_FAULTS at a named point of the engine (laneway/engine/faults.py).

Owns where each point is armed, how long load runs (until the fault fired), and the checks
beyond the checker's invariants. Used by the PR tier (test_fault_*.py) and by full.py.
"""

import asyncio
import os
import signal
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from uuid import UUID

from laneway.store.leases import RELEASED_AFTER_DATABASE_LOSS
from tests.chaos.checker import check, describe
from tests.chaos.crashes import steps_of
from tests.chaos.harness import ChaosRun, Outcome, RunConfig, chaos_run, w3_oracle
from tests.chaos.ledger import FinalInstance
from tests.chaos.supervisor import REPO
from tests.engine.helpers import eventually


def _armed(config: RunConfig, specs: Mapping[int, str]) -> RunConfig:
    slot_env = {**config.slot_env, **{slot: {"LANEWAY_FAULTS": s} for slot, s in specs.items()}}
    return replace(config, slot_env=slot_env)


def _owners_of(run: ChaosRun, slot: int) -> list[str]:
    prefix = f"{run.supervisor.prefix}{slot}g"
    return sorted({i.owner_id for i in run.supervisor.journal if i.owner_id.startswith(prefix)})


async def fault_fired(run: ChaosRun, slot: int, spec: str) -> bool:
    """A kill shows as a death of the slot's worker; a connection error as an instance its
    runner handed back once the database answered (laneway/engine/runner.py), or a lost lease."""
    owners = _owners_of(run, slot)
    if "=kill" in spec:
        return any(i.kind == "died" and i.owner_id in owners for i in run.supervisor.journal)
    rows = await run.fetch(
        "SELECT count(*) AS n FROM chaos.audit WHERE old_status = 'running'"
        " AND old_owner = ANY($1::text[]) AND new_owner IS NULL AND new_status = 'pending'"
        " AND (application_name <> 'laneway-worker-' || old_owner"
        "      OR EXISTS (SELECT 1 FROM laneway.events AS e"
        "                  WHERE e.instance_id = chaos.audit.instance_id"
        "                    AND e.type = 'retrying' AND e.error = $2))",
        owners,
        RELEASED_AFTER_DATABASE_LOSS,
    )
    return bool(rows[0]["n"])


async def r05_runner_points(
    database_url: str,
    log_dir: Path,
    config: RunConfig,
    *,
    specs: Mapping[int, str],
    min_instances: int = 0,
    rate_per_second: float = 30.0,
) -> Outcome:
    """Arm runner points on some slots; load until each fired and `min_instances` ran."""
    async with chaos_run(database_url, _armed(config, specs), log_dir) as run:

        async def all_fired() -> bool:
            if len(run.enqueued) < min_instances:
                return False
            fired = [await fault_fired(run, slot, spec) for slot, spec in specs.items()]
            return all(fired)

        await run.enqueue_until(all_fired, rate_per_second=rate_per_second, timeout=3600)
        await run.wait_settled(timeout=config.reclaim_max_seconds + 120)
        verdict = await run.verdict()
    armed_owners = {owner for slot in specs for owner in _owners_of(run, slot)}
    deaths = run.supervisor.incidents("died")
    return run.outcome(
        "R-05 " + ", ".join(specs.values()),
        f"{len(run.enqueued)} W3, {config.workers} workers",
        verdict,
        {
            "only armed workers died": all(d.owner_id in armed_owners for d in deaths),
        },
        {
            "deaths": str(len(deaths)),
            # A kill right after a worker's last commit may leave it holding no lease, so the
            # number of reclaims is a figure, not a pass condition.
            "reclaims": str(len(verdict.reclaim_seconds)),
            "duplicate step runs": str(verdict.duplicate_runs),
        },
    )


async def r05_release_point(
    database_url: str, log_dir: Path, config: RunConfig, *, terms: int = 1
) -> Outcome:
    """SIGTERM a worker armed with before_release=kill: nothing is handed back, leases expire."""
    armed = 0
    config = replace(_armed(config, {armed: "before_release=kill"}), concurrency=5)
    codes = []
    held_total = 0
    async with chaos_run(database_url, config, log_dir) as run:
        for term in range(terms):
            async with run.background_load(
                rate_per_second=30, params=steps_of(300, 600), key_prefix=f"r{term}-"
            ):
                await run.wait_ready()
                slot = await run.slot_holding_work([armed])
                held_total += len(await run.held_by(run.supervisor.workers[slot].owner_id))
                codes.append(await run.supervisor.terminate(slot))
        await run.wait_settled(timeout=config.reclaim_max_seconds + 120)
        verdict = await run.verdict()
    return run.outcome(
        "R-05 before_release=kill",
        f"{len(run.enqueued)} W3, {terms} SIGTERMs",
        verdict,
        {
            "died at the point": codes == [-signal.SIGKILL] * terms,
            "held work": held_total > 0,
            "every lease waited out": len(verdict.reclaim_seconds) >= held_total,
        },
        {"held": str(held_total)},
    )


async def r05_pause_point(
    database_url: str, log_dir: Path, config: RunConfig, *, probability: float, batch: int
) -> Outcome:
    """WP instances with pause_transition=kill armed on one worker; then resume them all."""
    config = _armed(config, {0: f"pause_transition=kill@{probability}"})
    async with chaos_run(database_url, config, log_dir) as run:

        async def died() -> bool:
            return bool(run.supervisor.incidents("died"))

        await run.enqueue_until(died, workflow="wp", batch=batch, timeout=3600)
        await run.wait_settled(timeout=config.reclaim_max_seconds + 120)
        paused = await run.fetch(
            "SELECT instance_id FROM laneway.instances WHERE status = 'paused'"
            " AND owner_id IS NULL AND lease_expires_at IS NULL"
        )
        for row in paused:
            await run.engine.resume(row["instance_id"])
        await run.wait_settled(timeout=120)
        verdict = await run.verdict()
    return run.outcome(
        "R-05 pause_transition=kill",
        f"{len(run.enqueued)} WP",
        verdict,
        {"all paused once, holding no lease": len(paused) == len(run.enqueued)},
        {"deaths": str(len(run.supervisor.incidents("died")))},
    )


async def _cancel_in_a_dying_process(database_url: str, instance_id: UUID) -> int:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.chaos.client",
        "cancel",
        database_url,
        str(instance_id),
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "LANEWAY_FAULTS": "cancel_transition=kill"},
    )
    async with asyncio.timeout(120):
        return await process.wait()


async def r05_cancel_point(
    database_url: str, log_dir: Path, config: RunConfig, *, cancels: int, others: int
) -> Outcome:
    """Cancel running instances from clients armed with cancel_transition=kill."""
    async with chaos_run(database_url, config, log_dir) as run:
        # Targets take 20 s a step: still running whenever the clients (slow to boot) cancel.
        targets = [
            await run.enqueue_one(f"target-{n}", {"n": n, "step_ms": [20_000, 20_000]})
            for n in range(cancels)
        ]
        await run.enqueue(others, rate_per_second=40)
        await eventually(run.held_everywhere, lambda held: set(targets) <= held, timeout=60)
        codes = await asyncio.gather(
            *(_cancel_in_a_dying_process(run.database_url, i) for i in targets)
        )
        await run.wait_settled(timeout=config.reclaim_max_seconds + 120)
        history = await run.history()
        late_steps = await run.fetch(
            "SELECT count(*) AS n FROM chaos.ledger AS l JOIN laneway.events AS e"
            "  ON e.instance_id = l.instance_id AND e.type = 'cancelled'"
            " WHERE l.at > e.at + interval '1 second'"
        )

    def cancelled_or_done(final: FinalInstance, params: object) -> bool:
        if final.instance_id in targets:
            return final.status == "cancelled"
        return w3_oracle(final, params)

    verdict = check(history, cancelled_or_done)
    run.last_description = describe(verdict, history)
    return run.outcome(
        "R-05 cancel_transition=kill",
        f"{cancels} cancels among {others} W3",
        verdict,
        {
            "each client died after its commit": codes == [-signal.SIGKILL] * cancels,
            "one terminal event each": all(
                history.stored.instances[i].terminal_events == 1 for i in targets
            ),
            "no step after the cancel": late_steps[0]["n"] == 0,
        },
    )


async def r05_cron_point(
    database_url: str, log_dir: Path, config: RunConfig, *, deaths: int = 3
) -> Outcome:
    """An every-1s schedule fired by a single worker that dies right after each fire commit.

    One worker, so every fire is the armed one's (two workers polling at the same period can
    lock into a phase where the other always fires first). Its instances wait until the
    schedule is disabled; then the worker's replacement runs them all.
    """
    config = replace(_armed(config, {0: "cron_insert=kill"}), workers=1)
    async with chaos_run(database_url, config, log_dir) as run:

        async def died() -> int:
            return len(run.supervisor.incidents("died"))

        await run.engine.create_schedule("tick", "w3", {"n": None}, every="1s")
        await eventually(died, lambda n: n >= deaths, timeout=120)
        await run.engine.set_schedule_enabled("tick", False)
        await run.wait_settled(timeout=config.reclaim_max_seconds + 120)
        fires = await run.fetch(
            "SELECT instance_id, idempotency_key, params FROM laneway.instances"
            " WHERE idempotency_key LIKE 'schedule:tick:%'"
        )
        run.enqueued.update({row["instance_id"]: row["params"] for row in fires})
        verdict = await run.verdict()
    keys = [row["idempotency_key"] for row in fires]
    return run.outcome(
        "R-05 cron_insert=kill",
        f"{len(keys)} fires of an every-1s schedule, {deaths} deaths",
        verdict,
        {
            "one instance per fire": len(keys) == len(set(keys)),
            "a fire per death at least": len(keys) >= deaths,
        },
        {"deaths": str(len(run.supervisor.incidents("died")))},
    )
