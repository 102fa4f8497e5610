"""The live workers registry (issue #18, point 4): every running engine registers itself,
heartbeats, removes itself at a clean stop, and ages out when it stops heartbeating."""

import asyncio
import os
import socket
from datetime import UTC
from uuid import UUID

import asyncpg
import pytest

from laneway.engine import Done, Engine, HandlerContext, Workflow
from laneway.errors import DatabaseNewerError
from laneway.model import Status, WaitingReason, WorkerRecord
from laneway.store import Store, open_store
from tests.engine.helpers import eventually, make_engine
from tests.workflows import noop, two_steps


def _by_owner(workers: list[WorkerRecord]) -> dict[str, WorkerRecord]:
    return {worker.owner_id: worker for worker in workers}


def _held() -> tuple[Workflow, asyncio.Event, asyncio.Event]:
    """A workflow `held` whose step sets `started`, then holds its run until `gate` is set."""
    gate = asyncio.Event()
    started = asyncio.Event()

    async def hold(ctx: HandlerContext, params: object) -> Done:
        started.set()
        await gate.wait()
        return Done()

    return Workflow("held", handlers={"run": hold}, initial="run"), started, gate


async def test_a_running_engine_is_listed_with_what_it_runs(store: Store) -> None:
    held, started, gate = _held()
    engine = make_engine(store, held, noop, owner_id="worker-a", concurrency=7, lease_seconds=0.6)
    assert await store.live_workers() == []
    async with engine.running():
        first = (await eventually(store.live_workers, lambda ws: len(ws) == 1))[0]
        assert first.owner_id == "worker-a"
        assert first.role == "worker"  # an engine run as a library
        assert first.host == socket.gethostname()
        assert first.pid == os.getpid()
        assert first.workflows == ("held", "noop")
        assert first.concurrency == 7
        assert first.heartbeat_seconds == pytest.approx(0.2)  # a third of the lease
        assert first.started_at <= first.last_seen_at

        await engine.enqueue("held")
        async with asyncio.timeout(10):
            await started.wait()
        # The next heartbeat reports the instance running here, and a later last_seen_at.
        busy = await eventually(store.live_workers, lambda ws: len(ws) == 1 and ws[0].running == 1)
        assert busy[0].last_seen_at > first.last_seen_at
        assert busy[0].started_at == first.started_at  # kept from the registration
        gate.set()
        idle = await eventually(store.live_workers, lambda ws: len(ws) == 1 and ws[0].running == 0)
        assert idle[0].owner_id == "worker-a"


async def test_two_engines_are_both_listed_and_a_clean_stop_removes_only_its_row(
    store: Store, database_url: str
) -> None:
    async with open_store(database_url) as other_store:
        serving = make_engine(store, noop, owner_id="serve-1", role="serve", lease_seconds=0.6)
        working = make_engine(
            other_store, two_steps, owner_id="worker-2", concurrency=3, lease_seconds=0.6
        )
        async with serving.running():
            async with working.running():
                both = _by_owner(await eventually(store.live_workers, lambda ws: len(ws) == 2))
                assert set(both) == {"serve-1", "worker-2"}
                assert both["serve-1"].role == "serve"
                assert both["serve-1"].workflows == ("noop",)
                assert both["worker-2"].role == "worker"
                assert both["worker-2"].workflows == ("two_steps",)
                assert both["worker-2"].concurrency == 3
                assert [w.owner_id for w in await serving.workers()] == ["serve-1", "worker-2"]
            # Stopped cleanly: gone at once, not after two missed heartbeats.
            left = await store.live_workers()
            assert [w.owner_id for w in left] == ["serve-1"]
            async with store.connection() as conn:
                assert await conn.fetchval("SELECT count(*) FROM laneway.workers") == 1
        assert await store.live_workers() == []


async def _run_here(store: Store, owner_id: str, instance_id: UUID) -> None:
    """Mark an instance as run by the live process `owner_id`, its lease 30 s ahead."""
    async with store.connection() as conn:
        await conn.execute(
            "UPDATE laneway.instances SET status = 'running', owner_id = $1,"
            " lease_expires_at = now() + interval '30 seconds' WHERE instance_id = $2",
            owner_id,
            instance_id,
        )


async def _behind_a_live_run(
    store: Store, engine: Engine, *, queue: str | None = None, concurrency_key: str | None = None
) -> WaitingReason:
    """The reason of an instance waiting behind one that `engine`'s live process runs, both
    enqueued to noop in `queue` with `concurrency_key`."""
    own = await engine.enqueue("noop", queue=queue, concurrency_key=concurrency_key)
    await _run_here(store, engine.owner_id, own.instance_id)
    behind = await engine.enqueue("noop", queue=queue, concurrency_key=concurrency_key)
    reason = await engine.waiting_reason(behind.instance_id)
    assert reason is not None
    return reason


async def _key_run_of_a_lost_process(store: Store, engine: Engine) -> tuple[UUID, UUID]:
    """Queue noop (key concurrency 1), which `engine`'s live process runs: the only run of its
    key Z, held by a process with no registry row (not live), and an instance of Z behind it."""
    await engine.configure_queue("noop", concurrency=6, key_concurrency=1)
    await engine.claim_loop.presence.beat()  # a live process runs noop
    held = await engine.enqueue("noop", concurrency_key="Z")
    [claimed] = await store.claim("gone-owner", ["noop@1"], 1, 30.0)  # no row: not live
    assert claimed.instance_id == held.instance_id
    waiting = await engine.enqueue("noop", concurrency_key="Z")
    return held.instance_id, waiting.instance_id


async def _ghost(admin: asyncpg.Connection, owner_id: str, seconds_ago: float) -> None:
    """The row of a process that stopped heartbeating `seconds_ago` (10 s heartbeats)."""
    await admin.execute(
        """
        INSERT INTO laneway.workers
               (owner_id, role, host, pid, workflows, running, concurrency,
                heartbeat_seconds, started_at, last_seen_at)
        VALUES ($1, 'worker', 'gone-host', 4242, ARRAY['noop'], 2, 10, 10,
                now() - interval '1 hour', now() - $2::double precision * interval '1 second')
        """,
        owner_id,
        seconds_ago,
    )


async def test_a_process_that_stops_heartbeating_drops_out_after_two_and_ages_out_after_three(
    store: Store, admin: asyncpg.Connection
) -> None:
    await _ghost(admin, "recent", 15.0)  # missed one heartbeat: still live
    await _ghost(admin, "silent", 25.0)  # missed two: not listed, its row kept
    await _ghost(admin, "gone", 31.0)  # missed three: its row is deleted
    listed = _by_owner(await store.live_workers())
    assert set(listed) == {"recent"}
    assert listed["recent"].host == "gone-host"
    assert listed["recent"].running == 2

    # A live engine's heartbeat deletes the aged-out row (and only that one).
    engine = make_engine(store, noop, owner_id="alive", lease_seconds=0.6)
    async with engine.running():
        await eventually(
            lambda: admin.fetchval("SELECT count(*) FROM laneway.workers WHERE owner_id = 'gone'"),
            lambda n: n == 0,
        )
        remaining = await admin.fetch("SELECT owner_id FROM laneway.workers ORDER BY owner_id")
        assert [row["owner_id"] for row in remaining] == ["alive", "recent", "silent"]
        assert set(_by_owner(await store.live_workers())) == {"alive", "recent"}


async def test_an_engine_that_is_not_running_is_not_registered(store: Store) -> None:
    # Driving an engine by hand (tick) or only enqueuing through it is not a live worker.
    engine = make_engine(store, noop, owner_id="by-hand")
    await engine.enqueue("noop")
    assert await engine.tick() == 1
    assert await engine.workers() == []


async def test_an_engine_stops_when_a_newer_release_migrates_the_database_under_it(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    # Its statements may be gone or changed under it (a migration replaces functions by their
    # signature): every write would fail and each instance it ran would burn its attempts. It
    # sees the newer migration at a heartbeat, claims nothing more, hands back what it holds,
    # and its run ends with the error, for the process to stop.
    held, started, gate = _held()
    engine = make_engine(store, held, lease_seconds=0.6, shutdown_grace_seconds=0.2)
    stopping = asyncio.Event()
    task = asyncio.create_task(engine.run(stopping))
    running = await engine.enqueue("held")
    async with asyncio.timeout(10):
        await started.wait()
    async with store.connection() as conn:
        await conn.execute(
            "INSERT INTO laneway.schema_migrations (name) VALUES ('9999_from_a_newer_release')"
        )
    with pytest.raises(DatabaseNewerError, match="9999_from_a_newer_release"):
        await asyncio.wait_for(task, timeout=10)
    handed_back = await engine.get(running.instance_id)
    assert handed_back is not None
    assert handed_back.status == Status.PENDING  # not failed: another process runs it
    assert await store.live_workers() == []
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [
        "the database was migrated by a newer release; stopping"
    ]
    gate.set()


async def test_a_queue_full_of_a_lost_workers_runs_says_when_their_leases_expire(
    store: Store,
) -> None:
    # Found by an outside audit: after a kill -9, QUEUE_FULL said "3 of 3 running" for a whole
    # lease while every slot was a dead process's; it now says so, and until when.
    engine = make_engine(store, noop)
    await engine.configure_queue("noop", concurrency=1)
    await engine.claim_loop.presence.beat()  # a live process runs noop
    held = await engine.enqueue("noop")
    [claimed] = await store.claim("gone-owner", ["noop@1"], 1, 30.0)  # no row: not live
    assert claimed.instance_id == held.instance_id
    waiting = await engine.enqueue("noop")
    reason = await engine.waiting_reason(waiting.instance_id)
    assert reason is not None
    assert reason.code == "QUEUE_FULL"
    expires = await engine.get(held.instance_id)
    assert expires is not None
    assert reason.until == expires.lease_expires_at
    assert reason.message.startswith("queue 'noop' is full: 1 of 1 running; 1 of them held")
    assert "a process that stopped" in reason.message

    # A live process's run is not one of them: no time is known then.
    await engine.configure_queue("own", concurrency=1)
    live = await _behind_a_live_run(store, engine, queue="own")
    assert (live.code, live.until) == ("QUEUE_FULL", None)
    assert live.message == "queue 'own' is full: 1 of 1 running"


async def test_a_full_queue_says_its_slot_is_a_silent_process_s_well_before_the_lease_expires(
    store: Store, admin: asyncpg.Connection
) -> None:
    # Found by an outside audit: after a kill -9 of the process holding a queue's only slot,
    # the hint and the workers list showed it for ~2 s of a 30 s lease (a process counted as
    # stopped after three missed heartbeats, when its leases expire anyway). Two missed
    # heartbeats (a heartbeat is a third of a lease) now show it, a third of a lease before.
    engine = make_engine(store, noop)
    await engine.configure_queue("noop", concurrency=1)
    await engine.claim_loop.presence.beat()  # a live process runs noop
    await store.heartbeat_worker(
        owner_id="killed", role="worker", host="gone-host", pid=4242, workflows=["noop"],
        versions=["noop@1"], running=1, concurrency=10, heartbeat_seconds=10.0,
    )  # fmt: skip
    held = await engine.enqueue("noop")
    [claimed] = await store.claim("killed", ["noop@1"], 1, 30.0)
    assert claimed.instance_id == held.instance_id
    waiting = await engine.enqueue("noop")
    # Its last heartbeat (and the renewal of its lease just before it) was 21 s ago: it missed
    # two heartbeats; its lease expires in 9 s.
    await admin.execute(
        "UPDATE laneway.workers SET last_seen_at = now() - interval '21 seconds'"
        " WHERE owner_id = 'killed'"
    )
    await admin.execute(
        "UPDATE laneway.instances SET lease_expires_at = now() + interval '9 seconds'"
        " WHERE instance_id = $1",
        held.instance_id,
    )
    reason = await engine.waiting_reason(waiting.instance_id)
    assert reason is not None
    assert reason.code == "QUEUE_FULL"
    lease = await engine.get(held.instance_id)
    assert lease is not None
    assert reason.until == lease.lease_expires_at
    assert reason.message.startswith(
        "queue 'noop' is full: 1 of 1 running; 1 of them held by a process that stopped"
    )
    assert [w.owner_id for w in await engine.workers()] == [engine.owner_id]
    # One missed heartbeat is not enough: a live process may just be late.
    await admin.execute(
        "UPDATE laneway.workers SET last_seen_at = now() - interval '15 seconds'"
        " WHERE owner_id = 'killed'"
    )
    late = await engine.waiting_reason(waiting.instance_id)
    assert late is not None
    assert (late.message, late.until) == ("queue 'noop' is full: 1 of 1 running", None)
    assert {w.owner_id for w in await engine.workers()} == {engine.owner_id, "killed"}


async def test_a_full_key_says_which_of_its_runs_a_lost_process_holds_and_until_when(
    store: Store,
) -> None:
    # Found by an outside audit: after a kill -9 of the process that held a key's only slot,
    # KEY_FULL said "key 'Z' of queue 'noop' is full: 1 of 1 running" with no `until` for a
    # whole lease, where a full queue said whose runs they were and when their leases expire.
    engine = make_engine(store, noop)
    held, waiting = await _key_run_of_a_lost_process(store, engine)
    # A lost run of another key of the queue is not one of the key's.
    other = await engine.enqueue("noop", concurrency_key="Y")
    [claimed] = await store.claim("gone-owner", ["noop@1"], 1, 30.0)
    assert claimed.instance_id == other.instance_id
    lease = await engine.get(held)
    assert lease is not None
    assert lease.lease_expires_at is not None
    reason = await engine.waiting_reason(waiting)
    assert reason is not None
    assert reason.code == "KEY_FULL"
    assert reason.until == lease.lease_expires_at
    at = lease.lease_expires_at.astimezone(UTC).isoformat(timespec="milliseconds")
    assert reason.message == (
        "key 'Z' of queue 'noop' is full: 1 of 1 running; 1 of them held by a process that"
        f" stopped heartbeating (the first of their leases expires at {at[:-6]}Z)"
    )

    # A live process's run is not one of them: no time is known then.
    live = await _behind_a_live_run(store, engine, concurrency_key="W")
    assert (live.code, live.until) == ("KEY_FULL", None)
    assert live.message == "key 'W' of queue 'noop' is full: 1 of 1 running"


async def test_a_lost_run_whose_lease_expired_is_being_recovered_and_until_is_not_past(
    store: Store, admin: asyncpg.Connection
) -> None:
    # Found by an outside audit: once the lease of a lost process's run had expired, and until
    # a claim loop's poll recovered the run, the full queue (or key) still said "the first of
    # their leases expires at" a time gone by, and `until` was in the past.
    engine = make_engine(store, noop)
    held, waiting = await _key_run_of_a_lost_process(store, engine)
    await admin.execute(
        "UPDATE laneway.instances SET lease_expires_at = now() - interval '5 seconds'"
        " WHERE instance_id = $1",
        held,
    )
    expired = await engine.get(held)
    assert expired is not None
    assert expired.lease_expires_at is not None
    at = expired.lease_expires_at.astimezone(UTC).isoformat(timespec="milliseconds")[:-6] + "Z"
    before = await admin.fetchval("SELECT now()")
    reason = await engine.waiting_reason(waiting)
    assert reason is not None
    assert reason.code == "KEY_FULL"
    assert reason.until is not None
    assert reason.until >= before
    assert reason.message == (
        "key 'Z' of queue 'noop' is full: 1 of 1 running; 1 of them held by a process that"
        f" stopped heartbeating (the first of their leases expired at {at}: it is recovered"
        " at the next poll of a live process)"
    )
    # The same for a full queue.
    await engine.configure_queue("noop", concurrency=1)
    unkeyed = await engine.enqueue("noop")
    queued = await engine.waiting_reason(unkeyed.instance_id)
    assert queued is not None
    assert queued.code == "QUEUE_FULL"
    assert queued.until is not None
    assert queued.until >= before
    assert queued.message.endswith(
        f"(the first of their leases expired at {at}: it is"
        " recovered at the next poll of a live process)"
    )


async def _beat(store: Store, owner_id: str, workflow: str, running: int, concurrency: int) -> None:
    """A heartbeat of a live process `owner_id` that runs `workflow` (version 1)."""
    await store.heartbeat_worker(
        owner_id=owner_id, role="worker", host="h", pid=4242, workflows=[workflow],
        versions=[f"{workflow}@1"], running=running, concurrency=concurrency,
        heartbeat_seconds=10.0,
    )  # fmt: skip


async def test_ready_says_so_when_every_live_worker_that_runs_it_was_busy(store: Store) -> None:
    # Found by an outside audit: with every live worker that runs its version at its own
    # concurrency, READY said "ready: queue 'noop' has room, it starts at the next claim"
    # though no process had room to claim it.
    engine = make_engine(store, noop)  # enqueues only: not a live process
    await _beat(store, "busy-a", "noop", running=2, concurrency=2)
    await _beat(store, "busy-b", "noop", running=3, concurrency=2)  # over: a heartbeat behind
    await _beat(store, "idle-other", "two_steps", running=0, concurrency=10)  # not its workflow
    waiting = await engine.enqueue("noop")
    reason = await engine.waiting_reason(waiting.instance_id)
    assert reason is not None
    assert (reason.code, reason.until) == ("READY", None)
    assert reason.message == (
        "ready: queue 'noop' has room; every live worker that runs it was busy at its last"
        " heartbeat (5 of 4 running), so it starts when one of them has room"
    )
    # One of them has room: the next claim.
    await _beat(store, "busy-b", "noop", running=1, concurrency=2)
    free = await engine.waiting_reason(waiting.instance_id)
    assert free is not None
    assert (free.code, free.message) == (
        "READY",
        "ready: queue 'noop' has room, it starts at the next claim",
    )
