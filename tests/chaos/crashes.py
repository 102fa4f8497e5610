"""Crash, stall, partition, shutdown and poison scenarios (R-01 to R-04, R-06, S-12).

docs/reliability.md describes each scenario, how it is measured and its latest figures.

Owns what each scenario does to the cluster and which conditions it checks beyond the
checker's invariants. Sizes and engine parameters come from the caller, so the PR tier
(test_*.py) and the full tier (full.py) run the same code at different scales.
"""

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from uuid import UUID

from tests.chaos.checker import check, describe
from tests.chaos.harness import ChaosRun, Outcome, RunConfig, chaos_run, w3_oracle
from tests.chaos.ledger import AuditRow, FinalInstance
from tests.chaos.proxy import TcpProxy

# A run a worker gave up after losing its lease: fenced out, stopped by its heartbeat, or
# crashed on a dead connection.
DROPPED = {"write fenced out", "stopping run", "runner crashed"}
FAILED_ROUND = {"claim round failed", "lease renewal failed", "runner crashed"}
COLLATERAL = "others dead-lettered with it"

Params = Callable[[int], object]


def steps_of(low_ms: int, high_ms: int) -> Params:
    """W3 params whose steps each take U(low, high) ms."""

    def params(n: int) -> object:
        return {"n": n, "step_ms": [low_ms, high_ms]}

    return params


def seconds_range(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}s" if values else "-"


# Per reclaim by another worker: the first step run after it, kept only where no later reclaim
# came before that run (the instance's re-claimer was not killed in turn).
LAST_RECLAIM_BEFORE_RERUN = """
SELECT a.old_owner, r.at
  FROM chaos.audit AS a
  CROSS JOIN LATERAL (SELECT min(l.at) AS at FROM chaos.ledger AS l
                       WHERE l.instance_id = a.instance_id AND l.at > a.at) AS r
 WHERE a.old_status = 'running' AND a.new_owner IS NULL
   AND a.application_name <> 'laneway-worker-' || a.old_owner
   AND r.at IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM chaos.audit AS later
                    WHERE later.instance_id = a.instance_id
                      AND later.old_status = 'running' AND later.new_owner IS NULL
                      AND later.at > a.at AND later.at < r.at)
"""


async def kill_to_rerun(run: ChaosRun) -> float | None:
    """Longest time from a kill to a step of one of the victim's instances running again.

    Measured from the kill of the instance's last owner before the re-run: when the worker
    that re-claimed it was killed in turn before running a step (100 kills in a few minutes
    make that happen), that instance counts against the later kill, not the first.
    """
    kills = {kill.owner_id: kill.at for kill in run.supervisor.incidents("kill")}
    worst: float | None = None
    for row in await run.fetch(LAST_RECLAIM_BEFORE_RERUN):
        killed_at = kills.get(row["old_owner"])
        if killed_at is not None and row["at"] > killed_at:
            seconds = (row["at"] - killed_at).total_seconds()
            worst = seconds if worst is None else max(worst, seconds)
    return worst


# -- R-01 -------------------------------------------------------------------------------------


async def r01_kills(
    database_url: str,
    log_dir: Path,
    config: RunConfig,
    *,
    kills: int,
    progress_between_kills: int,
    rate_per_second: float,
    min_instances: int = 0,
) -> Outcome:
    """SIGKILL a busy worker, one worker down at a time, while load runs, until `kills` kills
    have each cost a lease."""
    async with chaos_run(database_url, config, log_dir) as run:

        async def kill_busy_workers() -> None:
            costly = 0
            while costly < kills:
                await run.wait_completed(await run.completed() + progress_between_kills)
                await run.wait_ready()
                victim = await run.supervisor.kill(await run.slot_holding_work())
                # Its runs may all have ended between the look and the kill: that kill cost no
                # lease, and another one is made in its place.
                costly += (await run.running_by_owner()).get(victim.owner_id, 0) > 0

        async with asyncio.TaskGroup() as group:
            killing = group.create_task(kill_busy_workers())

            async def enough() -> bool:
                return killing.done() and len(run.enqueued) >= min_instances

            await run.enqueue_until(enough, batch=40, rate_per_second=rate_per_second, timeout=3600)
        await run.wait_settled(timeout=config.reclaim_max_seconds + 120)
        rerun = await kill_to_rerun(run)
        verdict = await run.verdict()
    return run.outcome(
        "R-01 kill -9",
        f"{len(run.enqueued)} W3, {config.workers} workers, {kills} kills",
        verdict,
        {
            "no death but ours": run.supervisor.incidents("died") == [],
            "kills cost leases": len(verdict.reclaim_seconds) >= kills,
            "kill to re-run <= RECLAIM_MAX + 3 s": (rerun or 0.0) <= config.reclaim_max_seconds + 3,
        },
        {
            "duplicate step runs": str(verdict.duplicate_runs),
            "kill to re-run max": f"{rerun:.1f}s" if rerun is not None else "-",
        },
    )


# -- R-02 -------------------------------------------------------------------------------------


def _dropped(run: ChaosRun, owner_id: str) -> set[str]:
    entries = run.supervisor.by_owner(owner_id).log_messages()
    return {str(e.get("instance_id")) for e in entries if e.get("message") in DROPPED}


async def _finishers(run: ChaosRun, instances: set[UUID]) -> list[str]:
    rows = await run.fetch(
        "SELECT DISTINCT ON (instance_id) application_name FROM chaos.audit"
        " WHERE instance_id = ANY($1::uuid[]) AND new_status = 'completed'"
        " ORDER BY instance_id, at",
        list(instances),
    )
    return [row["application_name"] for row in rows]


async def r02_zombies(
    database_url: str, log_dir: Path, config: RunConfig, *, stops: int, rate_per_second: float
) -> Outcome:
    """SIGSTOP a busy worker until others recovered its leases, then SIGCONT it; `stops` times."""
    checks: dict[str, bool] = {}
    stopped_seconds: list[float] = []
    async with chaos_run(database_url, config, log_dir) as run:
        for stop in range(stops):
            async with run.background_load(
                rate_per_second=rate_per_second, params=steps_of(100, 300), key_prefix=f"s{stop}-"
            ):
                slot = await run.slot_holding_work()
                zombie = run.supervisor.stop(slot)
                stopped = time.monotonic()
                held = await run.held_by(zombie.owner_id)
                await run.wait_taken_over(held, zombie.owner_id, config.reclaim_max_seconds + 30)
                woke = run.supervisor.cont(slot).owner_id
                stopped_seconds.append(time.monotonic() - stopped)
                await run.wait_claiming(woke, run.supervisor.incidents("cont")[-1].at)
            await run.wait_settled(timeout=config.reclaim_max_seconds + 120)
            finishers = await _finishers(run, held)
            checks[f"stop {stop + 1}: held work"] = bool(held)
            checks[f"stop {stop + 1}: others finished it"] = len(finishers) == len(held) and all(
                name != f"laneway-worker-{woke}" for name in finishers
            )
            checks[f"stop {stop + 1}: zombie dropped it"] = {str(i) for i in held} <= _dropped(
                run, woke
            )
        verdict = await run.verdict()
    checks["no death"] = run.supervisor.incidents("died") == []
    return run.outcome(
        "R-02 SIGSTOP zombie",
        f"{len(run.enqueued)} W3, {stops} stops of {seconds_range(stopped_seconds)}",
        verdict,
        checks,
        {"stopped for": seconds_range(stopped_seconds)},
    )


# -- R-03 -------------------------------------------------------------------------------------


def _first_failure_after(run: ChaosRun, owner_id: str, moment: datetime) -> float | None:
    for entry in run.supervisor.by_owner(owner_id).log_messages():
        if entry.get("message") in FAILED_ROUND:
            at = datetime.fromisoformat(str(entry["time"]))
            if at > moment:
                return (at - moment).total_seconds()
    return None


async def r03_partitions(
    database_url: str,
    log_dir: Path,
    config: RunConfig,
    *,
    partitions: int,
    rate_per_second: float,
    partitioned_slot: int = 0,
) -> Outcome:
    """Blackhole one worker's database link until its leases were recovered, then heal."""
    checks: dict[str, bool] = {}
    detections: list[float] = []
    cut_seconds: list[float] = []
    proxy = TcpProxy(database_url)
    async with proxy.running() as proxied_url:
        slot_env = {**config.slot_env, partitioned_slot: {"DATABASE_URL": proxied_url}}
        async with chaos_run(database_url, replace(config, slot_env=slot_env), log_dir) as run:
            for cut in range(partitions):
                async with run.background_load(
                    rate_per_second=rate_per_second,
                    params=steps_of(100, 300),
                    key_prefix=f"p{cut}-",
                ):
                    await run.slot_holding_work([partitioned_slot])
                    owner = run.supervisor.workers[partitioned_slot].owner_id
                    held = await run.held_by(owner)
                    started = run.supervisor.record(owner, "partition").at
                    began = time.monotonic()
                    proxy.set_mode("blackhole")
                    await run.wait_taken_over(held, owner, config.reclaim_max_seconds + 30)
                    proxy.set_mode("pass")
                    healed = run.supervisor.record(owner, "heal").at
                    cut_seconds.append(time.monotonic() - began)
                    await run.wait_claiming(owner, healed)
                detected = _first_failure_after(run, owner, started)
                if detected is not None:
                    detections.append(detected)
                checks[f"cut {cut + 1}: held work"] = bool(held)
            await run.wait_settled(timeout=config.reclaim_max_seconds + 120)
            verdict = await run.verdict()
    checks["no death"] = run.supervisor.incidents("died") == []
    return run.outcome(
        "R-03 blackholed link",
        f"{len(run.enqueued)} W3, {partitions} cuts of {seconds_range(cut_seconds)}",
        verdict,
        checks,
        {
            "cut for": seconds_range(cut_seconds),
            "first error after cut": seconds_range(detections),
        },
    )


# -- R-04 -------------------------------------------------------------------------------------


RELEASE_AFTER_CHECKPOINT = 0.25
"""Seconds from a stopping worker's checkpoint to its release: its steps take 0.3-0.9 s, so a
release held until the slowest sibling's step ended would often take longer."""


def pickup_seconds(run: ChaosRun, audit: list[AuditRow]) -> tuple[list[float], list[float]]:
    """For each release by a terminated worker, the seconds until some worker claimed it,
    and the seconds since the checkpoint it was released at (the row before it: its steps
    all end within the grace, so each is released at a checkpoint)."""
    terminated = {f"laneway-worker-{i.owner_id}" for i in run.supervisor.incidents("term")}
    pickups, holds = [], []
    for index, row in enumerate(audit):
        released = row.old_status == "running" and row.new_status == "pending"
        if released and row.application_name in terminated:
            claim = next(
                later
                for later in audit[index + 1 :]
                if later.instance_id == row.instance_id and later.new_status == "running"
            )
            pickups.append((claim.at - row.at).total_seconds())
            checkpoint = next(
                earlier
                for earlier in reversed(audit[:index])
                if earlier.instance_id == row.instance_id
            )
            holds.append((row.at - checkpoint.at).total_seconds())
    return pickups, holds


async def r04_sigterms(
    database_url: str, log_dir: Path, config: RunConfig, *, terms: int, batch: int
) -> Outcome:
    """SIGTERM a busy worker `terms` times (the others up); released work is picked up."""
    codes = []
    async with chaos_run(database_url, config, log_dir) as run:
        for term in range(terms):
            await run.enqueue(
                batch, rate_per_second=30, params=steps_of(300, 900), key_prefix=f"t{term}"
            )
            slot = await run.slot_holding_work()
            codes.append(await run.supervisor.terminate(slot))
            await run.wait_ready()  # the others are up and claiming (a boot takes seconds)
        await run.wait_settled(timeout=config.reclaim_max_seconds + 120)
        history = await run.history()
        verdict = await run.verdict()
    pickups, holds = pickup_seconds(run, history.stored.audit)
    bound = 1.0 + config.poll_seconds
    return run.outcome(
        "R-04 SIGTERM",
        f"{len(run.enqueued)} W3, {terms} SIGTERMs, lease {config.lease_seconds:g}s",
        verdict,
        {
            "clean exits": codes == [0] * terms,
            "releases seen": len(pickups) >= terms,
            f"pick-up <= {bound:g}s": bool(pickups) and max(pickups) <= bound,
            # Each released at its own checkpoint, not after the slowest step in flight.
            "released at its checkpoint": bool(holds) and max(holds) <= RELEASE_AFTER_CHECKPOINT,
            "no lease waited out": verdict.reclaim_seconds == [],
            # Steps in flight finish within the grace period before the hand-back.
            "no step ran twice": verdict.duplicate_runs == 0,
        },
        {
            "pick-up": seconds_range(pickups),
            "checkpoint to release": seconds_range(holds),
            "released": str(len(pickups)),
            "duplicate step runs": str(verdict.duplicate_runs),
        },
    )


# -- R-06 -------------------------------------------------------------------------------------


async def r06_poison(
    database_url: str,
    log_dir: Path,
    config: RunConfig,
    *,
    others: int,
    rate_per_second: float,
    max_recoveries: int = 3,
) -> Outcome:
    """One instance whose step two SIGKILLs its worker, among `others` ordinary ones (steps of
    100-300 ms, so that several are in flight on every worker when the poison kills it)."""
    cap = {"LANEWAY_MAX_RECOVERIES": str(max_recoveries)}
    config = replace(config, worker_env={**config.worker_env, **cap})
    async with chaos_run(database_url, config, log_dir) as run:
        poison = await run.enqueue_one("poison", {"n": -1, "poison": True})
        await run.enqueue(
            others,
            rate_per_second=rate_per_second,
            params=lambda n: {"n": n, "step_ms": [100, 300]},
        )
        settle = (max_recoveries + 1) * (config.reclaim_max_seconds + 10) + 60
        await run.wait_settled(timeout=settle)
        history = await run.history()
        span = await run.fetch(
            "SELECT count(*) AS n, extract(epoch FROM max(finished_at) - min(created_at)) AS s"
            " FROM laneway.instances WHERE instance_id <> $1 AND status = 'completed'",
            poison,
        )
    # Completed others per second from the first enqueue to the last completion, against
    # the paced input rate (what a run without the poison sustains).
    throughput = span[0]["n"] / float(span[0]["s"])

    def dead_lettered_or_done(final: FinalInstance, params: object) -> bool:
        if final.instance_id == poison:
            error = final.last_error or ""
            return final.status == "failed" and error.startswith("DeadLettered:")
        return w3_oracle(final, params)

    verdict = check(history, dead_lettered_or_done)
    run.last_description = describe(verdict, history)
    recoveries = [
        row.new_status
        for row in history.stored.audit
        if row.instance_id == poison and row.old_status == "running" and row.new_owner is None
    ]
    collateral = [
        final.instance_id
        for final in history.stored.instances.values()
        if final.instance_id != poison and (final.last_error or "").startswith("DeadLettered:")
    ]
    # The others that lost their worker with the poison, at each of its deaths (a recovery's
    # audit row names the owner it was taken from). From its second loss it runs alone.
    lost = [
        row
        for row in history.stored.audit
        if row.old_status == "running"
        and row.new_status in ("pending", "failed")  # not a completion after an earlier loss
        and row.new_owner is None
        and (row.last_error or "").startswith(("WorkerLost:", "DeadLettered:"))
    ]
    lost_with = [
        sum(1 for other in lost if other.instance_id != poison and other.old_owner == row.old_owner)
        for row in lost
        if row.instance_id == poison
    ]
    return run.outcome(
        "R-06 poison pill",
        f"1 poison + {others} W3, cap {max_recoveries}",
        verdict,
        {
            "dead-lettered after the cap": recoveries == ["pending"] * max_recoveries + ["failed"],
            "one failed event": history.stored.instances[poison].terminal_events == 1,
            "deaths = cap + 1": len(run.supervisor.incidents("died")) == max_recoveries + 1,
            "alone from its second loss": len(lost_with) == max_recoveries + 1
            and not any(lost_with[min(max_recoveries, 2) :]),
        },
        {
            "worker deaths": str(len(run.supervisor.incidents("died"))),
            COLLATERAL: str(len(collateral)),
            "others lost with it, per death": ", ".join(map(str, lost_with)),
            "others' throughput / input rate": f"{throughput / rate_per_second:.0%}",
        },
    )


# -- S-12 -------------------------------------------------------------------------------------


async def renewal_gaps(run: ChaosRun) -> list[float]:
    """Seconds between consecutive lease renewals of one instance by one owner (audit rows
    where a running instance kept its owner and its renewal time moved)."""
    rows = await run.fetch(
        "SELECT EXTRACT(EPOCH FROM new_renewed_at - old_renewed_at)::float8 AS gap"
        "  FROM chaos.audit"
        " WHERE old_status = 'running' AND new_status = 'running'"
        "   AND old_owner = new_owner AND new_renewed_at > old_renewed_at"
    )
    return [row["gap"] for row in rows]


async def s12_busy_workers(
    database_url: str,
    log_dir: Path,
    config: RunConfig,
    *,
    seconds: float,
    busy_threads: int,
    rate_per_second: float,
) -> Outcome:
    """Long steps on workers whose CPU is taken by busy threads: leases must still be renewed
    in time, so no live owner loses its instances."""
    busy_env = {**config.worker_env, "LANEWAY_CHAOS_BUSY_THREADS": str(busy_threads)}
    async with chaos_run(database_url, replace(config, worker_env=busy_env), log_dir) as run:
        async with run.background_load(
            rate_per_second=rate_per_second, params=steps_of(8_000, 16_000), key_prefix="b-"
        ):
            await asyncio.sleep(seconds)  # the load runs this long (a scenario, not a test)
        await run.wait_settled(timeout=config.reclaim_max_seconds + 180)
        gaps = sorted(await renewal_gaps(run))
        verdict = await run.verdict()
    interval = config.lease_seconds / 3.0
    lag_p99 = gaps[int(0.99 * (len(gaps) - 1))] - interval if gaps else None
    return run.outcome(
        "S-12 busy workers",
        f"{len(run.enqueued)} W3 with 8-16 s steps, {busy_threads} busy threads per worker",
        verdict,
        {
            "renewals happened": len(gaps) > 0,
            "0 premature reclaims": not verdict.premature,
            "0 reclaims of live owners": not verdict.reclaim_seconds,
            "renewal lag p99 < lease/3": lag_p99 is not None and lag_p99 < interval,
        },
        {
            "renewals": str(len(gaps)),
            "renewal lag p99": f"{lag_p99:.2f}s" if lag_p99 is not None else "-",
        },
    )
