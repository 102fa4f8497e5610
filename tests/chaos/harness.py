"""One chaos run: the chaos schema, supervised workers, a paced client, and the checker's verdict.

Owns the shape every scenario shares (PR tier and full tier alike): install the ledger and
audit trigger, start workers with the run's engine parameters, enqueue at a steady rate with
idempotency keys (retrying through database outages), wait until every instance settled, read
the history back and judge it. Scenarios decide which faults to inject and when.
"""

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

import asyncpg

from laneway.engine import Engine, WorkflowRegistry
from laneway.store import Store, open_store
from tests.chaos.checker import (
    RECLAIM_SLACK_SECONDS,
    History,
    Oracle,
    Verdict,
    check,
    describe,
)
from tests.chaos.ledger import TERMINAL, FinalInstance, install, read_history
from tests.chaos.supervisor import Supervisor, supervise
from tests.chaos.workflows import expected_result, w3, wp
from tests.engine.helpers import eventually

CLIENT_APPLICATION_NAME = "chaos-client"
# What a client sees while the server restarts: refused or dropped connections, and asyncpg's
# InternalClientError on a pooled connection that broke in the middle of an operation.
DATABASE_DOWN = (
    OSError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
)
SETTLED = (*TERMINAL, "paused")


def w3_oracle(final: FinalInstance, params: object) -> bool:
    """A W3 or WP instance ended right: completed with exactly one, two, three."""
    return final.status == "completed" and final.result == expected_result(params)


async def _until(deadline: float) -> None:
    """Sleep until the monotonic clock reads `deadline` (at once when it is past)."""
    delay = deadline - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)


@dataclass(kw_only=True)
class Outcome:
    """What a scenario measured: the checker's verdict, named pass conditions, figures."""

    scenario: str
    size: str
    verdict: Verdict
    description: str = ""
    checks: dict[str, bool] = field(default_factory=dict)
    figures: dict[str, str] = field(default_factory=dict)
    resume_seconds: list[float] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.verdict.passed and all(self.checks.values())

    def explain(self) -> str:
        failed = [name for name, ok in self.checks.items() if not ok]
        return "\n".join(
            [
                f"{self.scenario} ({self.size}): {'pass' if self.passed else 'FAIL'}",
                self.description or self.verdict.summary(),
                f"failed checks: {failed}",
                f"figures: {self.figures}",
            ]
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RunConfig:
    """Engine parameters of the workers and the shape of the cluster."""

    workers: int = 3
    lease_seconds: float = 2.0
    poll_seconds: float = 0.2
    idle_in_transaction_seconds: float = 1.5
    concurrency: int = 100
    worker_env: Mapping[str, str] = field(default_factory=dict)
    slot_env: Mapping[int, Mapping[str, str]] = field(default_factory=dict)

    @property
    def reclaim_max_seconds(self) -> float:
        """RECLAIM_MAX: lease + reaper tick (the poll) + 2 s."""
        return self.lease_seconds + self.poll_seconds + RECLAIM_SLACK_SECONDS

    def env(self, database_url: str) -> dict[str, str]:
        return {
            "DATABASE_URL": database_url,
            "LANEWAY_WORKFLOWS": "tests.chaos.workflows",
            "LANEWAY_LEASE_SECONDS": str(self.lease_seconds),
            "LANEWAY_POLL_SECONDS": str(self.poll_seconds),
            "LANEWAY_IDLE_IN_TRANSACTION_TIMEOUT": str(self.idle_in_transaction_seconds),
            "LANEWAY_WORKER_CONCURRENCY": str(self.concurrency),
            "LANEWAY_CHAOS_LEDGER_URL": database_url,
            "LANEWAY_CHAOS_WORKER": "1",
            **self.worker_env,
        }


@dataclass(eq=False, kw_only=True)
class ChaosRun:
    """A running cluster: the client engine (its loop never runs), the workers, the logs."""

    database_url: str
    config: RunConfig
    store: Store
    engine: Engine
    supervisor: Supervisor
    enqueued: dict[UUID, object] = field(default_factory=dict)
    outages: list[tuple[datetime, datetime]] = field(default_factory=list)
    enqueue_retries: int = 0
    last_description: str = ""

    async def fetch(self, sql: str, *args: object) -> list[asyncpg.Record]:
        async with self.store.connection() as conn:
            return await conn.fetch(sql, *args)

    async def enqueue_one(self, key: str, params: object, workflow: str = "w3") -> UUID:
        """Enqueue with an idempotency key, retrying while the database is unreachable."""
        async with asyncio.timeout(120):
            while True:
                try:
                    result = await self.engine.enqueue(workflow, params, idempotency_key=key)
                except DATABASE_DOWN:
                    self.enqueue_retries += 1
                    await asyncio.sleep(0.1)
                    continue
                self.enqueued[result.instance.instance_id] = params
                return result.instance.instance_id

    async def enqueue(
        self,
        count: int,
        *,
        rate_per_second: float,
        workflow: str = "w3",
        params: Callable[[int], object] | None = None,
        key_prefix: str = "c",
    ) -> list[UUID]:
        """Enqueue `count` instances at a steady rate (deadline-paced, so retries catch up). It
        returns once the batch's time is up too (count / rate), so that batches in a row keep
        the rate: a batch of one would otherwise go out as fast as enqueues do."""
        started = time.monotonic()
        ids = []
        for n in range(count):
            await _until(started + n / rate_per_second)
            value = params(n) if params is not None else {"n": n}
            ids.append(await self.enqueue_one(f"{key_prefix}-{n}", value, workflow))
        await _until(started + count / rate_per_second)
        return ids

    async def enqueue_until(
        self,
        done: Callable[[], Awaitable[bool]],
        *,
        batch: int = 30,
        rate_per_second: float = 30.0,
        timeout: float = 60.0,
        workflow: str = "w3",
        params: Callable[[int], object] | None = None,
        key_prefix: str = "b",
    ) -> int:
        """Enqueue batches until `done()` holds (a fault fired); how many batches it took."""
        async with asyncio.timeout(timeout):
            rounds = 0
            while not rounds or not await done():
                await self.enqueue(
                    batch,
                    rate_per_second=rate_per_second,
                    workflow=workflow,
                    params=params,
                    key_prefix=f"{key_prefix}{rounds}",
                )
                rounds += 1
            return rounds

    @contextlib.asynccontextmanager
    async def background_load(
        self,
        *,
        rate_per_second: float,
        params: Callable[[int], object] | None = None,
        key_prefix: str = "l",
    ) -> AsyncIterator[None]:
        """Enqueue steadily during the block; the batch in progress completes after it."""
        stop = asyncio.Event()

        async def stopped() -> bool:
            return stop.is_set()

        async with asyncio.TaskGroup() as group:
            group.create_task(
                self.enqueue_until(
                    stopped,
                    batch=max(1, round(rate_per_second / 2)),
                    rate_per_second=rate_per_second,
                    params=params,
                    key_prefix=key_prefix,
                    timeout=24 * 3600,
                )
            )
            try:
                yield
            finally:
                stop.set()

    async def running_by_owner(self) -> dict[str, int]:
        rows = await self.fetch(
            "SELECT owner_id, count(*) AS n FROM laneway.instances"
            " WHERE status = 'running' AND owner_id IS NOT NULL GROUP BY owner_id"
        )
        return {row["owner_id"]: row["n"] for row in rows}

    async def wait_ready(self) -> None:
        """Until every current worker (a replacement too) has its pool open and is claiming."""
        async with self.store.connection() as conn:
            await self.supervisor.wait_ready(conn)

    async def held_by(self, owner_id: str) -> set[UUID]:
        """The instances running under `owner_id` now."""
        rows = await self.fetch(
            "SELECT instance_id FROM laneway.instances WHERE status = 'running' AND owner_id = $1",
            owner_id,
        )
        return {row["instance_id"] for row in rows}

    async def claims_after(self, owner_id: str, moment: datetime) -> int:
        """How many claims `owner_id` made after `moment` (from the audit)."""
        rows = await self.fetch(
            "SELECT count(*) AS n FROM chaos.audit WHERE application_name = $1"
            " AND old_status = 'pending' AND new_status = 'running' AND at > $2",
            f"laneway-worker-{owner_id}",
            moment,
        )
        return int(rows[0]["n"])

    async def wait_claiming(self, owner_id: str, since: datetime, timeout: float = 60) -> None:
        """Until `owner_id` claimed something after `since`: it is back at work."""
        await eventually(lambda: self.claims_after(owner_id, since), lambda n: n > 0, timeout)

    async def held_everywhere(self) -> set[UUID]:
        """The instances running now, under any owner."""
        rows = await self.fetch(
            "SELECT instance_id FROM laneway.instances WHERE status = 'running'"
        )
        return {row["instance_id"] for row in rows}

    async def wait_taken_over(self, instances: set[UUID], owner_id: str, timeout: float) -> None:
        """Until none of `instances` runs under `owner_id` any more (its leases were recovered)."""
        await eventually(lambda: self.held_by(owner_id), lambda held: not held & instances, timeout)

    async def slot_holding_work(
        self, slots: list[int] | None = None, *, timeout: float = 30.0
    ) -> int:
        """A slot (of `slots`, default any) whose worker holds running instances right now."""
        candidates = slots if slots is not None else list(self.supervisor.workers)
        async with asyncio.timeout(timeout):
            while True:
                running = await self.running_by_owner()
                busy = [
                    slot
                    for slot in candidates
                    if slot in self.supervisor.workers
                    and running.get(self.supervisor.workers[slot].owner_id, 0) > 0
                ]
                if busy:
                    return random.choice(busy)
                await asyncio.sleep(0.02)

    async def completed(self) -> int:
        rows = await self.fetch(
            "SELECT count(*) AS n FROM laneway.instances WHERE status = 'completed'"
        )
        return int(rows[0]["n"])

    async def wait_completed(self, count: int, timeout: float = 120.0) -> None:
        """Until at least `count` instances completed: faults are placed by progress."""
        await eventually(self.completed, lambda n: n >= count, timeout)

    async def unsettled(self) -> int:
        rows = await self.fetch(
            "SELECT count(*) AS n FROM laneway.instances WHERE status <> ALL($1::text[])",
            list(SETTLED),
        )
        return int(rows[0]["n"])

    async def wait_settled(self, timeout: float) -> float:
        """Wait until every instance is terminal or paused; the seconds it took."""
        started = time.monotonic()
        try:
            async with asyncio.timeout(timeout):
                while True:
                    try:
                        if await self.unsettled() == 0:
                            return time.monotonic() - started
                    except DATABASE_DOWN:
                        pass  # the database is restarting
                    await asyncio.sleep(0.1)
        except TimeoutError:
            left = await self.unsettled()
            raise AssertionError(f"{left} instances not settled after {timeout} s") from None

    @contextlib.asynccontextmanager
    async def outage(self) -> AsyncIterator[None]:
        """Declare the database down for the block (the checker does not judge reclaims then)."""
        started = datetime.now(UTC)
        try:
            yield
        finally:
            self.outages.append((started, datetime.now(UTC)))

    async def history(self, step_boundaries: int | None = 2) -> History:
        async with self.store.connection() as conn:
            stored = await read_history(conn)
        return History(
            enqueued=dict(self.enqueued),
            stored=stored,
            incidents=list(self.supervisor.journal),
            outages=list(self.outages),
            lease_seconds=self.config.lease_seconds,
            tick_seconds=self.config.poll_seconds,
            step_boundaries=step_boundaries,
        )

    async def verdict(self, oracle: Oracle = w3_oracle) -> Verdict:
        """The checker's verdict; `self.explain()` describes its failures."""
        history = await self.history()
        verdict = check(history, oracle)
        self.last_description = describe(verdict, history)
        return verdict

    def explain(self) -> str:
        return self.last_description

    def outcome(
        self,
        scenario: str,
        size: str,
        verdict: Verdict,
        checks: Mapping[str, bool],
        figures: Mapping[str, str] | None = None,
    ) -> Outcome:
        """Wrap the verdict (from `verdict()`) with the scenario's own checks and figures."""
        return Outcome(
            scenario=scenario,
            size=size,
            verdict=verdict,
            description=self.last_description,
            checks=dict(checks),
            figures=dict(figures or {}),
        )


@contextlib.asynccontextmanager
async def chaos_run(
    database_url: str, config: RunConfig, log_dir: Path, *, prefix: str = "w"
) -> AsyncIterator[ChaosRun]:
    """Install the chaos schema, start the workers and a client; stop everything on exit."""
    async with open_store(database_url, application_name=CLIENT_APPLICATION_NAME) as store:
        async with store.connection() as conn:
            await install(conn)
        engine = Engine(store, WorkflowRegistry([w3, wp]))
        async with supervise(
            config.env(database_url),
            log_dir,
            workers=config.workers,
            slot_env=config.slot_env,
            prefix=prefix,
        ) as supervisor:
            run = ChaosRun(
                database_url=database_url,
                config=config,
                store=store,
                engine=engine,
                supervisor=supervisor,
            )
            await run.wait_ready()
            yield run
