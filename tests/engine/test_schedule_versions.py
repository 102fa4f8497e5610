"""Schedules in a rolling deploy (issue #21): a fire starts the newest version that the live
deployment runs, whichever process fires it; an engine leaves a due schedule to a live peer
with a newer version, and fires it itself once no live process has one."""

from typing import Any

import asyncpg

from laneway import Done, HandlerContext, Workflow
from laneway.model import JSONValue
from laneway.store import Store, open_store
from tests.engine.helpers import eventually, make_engine


def ship(version: str) -> Workflow:
    async def only(ctx: HandlerContext, params: JSONValue) -> Done:
        return Done({"ran_on": version})

    return Workflow(name="ship", version=version, handlers={"only": only}, initial="only")


async def _fired(store: Store) -> list[tuple[str, str]]:
    """(fire key, version) of every instance, by fire key."""
    async with store.connection() as conn:
        rows = await conn.fetch(
            "SELECT idempotency_key, version FROM laneway.instances ORDER BY idempotency_key"
        )
    return [(row["idempotency_key"], row["version"]) for row in rows]


async def _make_due(admin: asyncpg.Connection) -> None:
    await admin.execute("UPDATE laneway.schedules SET next_run_at = now() - interval '1 second'")


async def _still_due(store: Store) -> bool:
    seconds = await store.next_schedule_in(["ship"])
    return seconds is not None and seconds <= 0


async def test_an_engine_leaves_a_due_schedule_to_a_live_peer_with_a_newer_version(
    store: Store, admin: asyncpg.Connection
) -> None:
    old = make_engine(store, ship("1"), owner_id="old")
    new = make_engine(store, ship("1"), ship("2"), owner_id="new")
    await old.claim_loop.presence.beat()
    await new.claim_loop.presence.beat()
    await old.create_schedule("often", "ship", every="1h")
    await _make_due(admin)

    await old.claim_loop.maintain()  # the old code's process does not fire it ...
    assert await _fired(store) == []
    assert await _still_due(store)  # ... and neither locks nor advances it

    await new.claim_loop.maintain()  # the newest version's process does
    [(key, version)] = await _fired(store)
    assert key.startswith("schedule:often:")
    assert version == "2"
    assert not await _still_due(store)


async def test_a_peer_with_the_same_or_an_older_version_does_not_hold_a_fire_back(
    store: Store, admin: asyncpg.Connection
) -> None:
    both = make_engine(store, ship("1"), ship("2"), owner_id="both")
    same = make_engine(store, ship("2"), owner_id="same")
    older = make_engine(store, ship("1"), owner_id="older")
    for engine in (both, same, older):
        await engine.claim_loop.presence.beat()
    await both.create_schedule("often", "ship", every="1h")
    await _make_due(admin)
    await both.claim_loop.maintain()
    assert [version for _, version in await _fired(store)] == ["2"]


async def test_a_schedule_left_to_a_newer_peer_fires_locally_once_that_peer_stops_heartbeating(
    store: Store, admin: asyncpg.Connection
) -> None:
    old = make_engine(store, ship("1"), owner_id="old", poll_interval_seconds=0.05)
    new = make_engine(store, ship("2"), owner_id="new")  # heartbeats every 10 s
    await new.claim_loop.presence.beat()
    await old.create_schedule("often", "ship", every="1h")
    await _make_due(admin)
    await old.claim_loop.maintain()
    assert await _fired(store) == []  # left to `new`, live

    # `new` was killed: it missed two heartbeats, so it is no longer live (its row is kept).
    await admin.execute(
        "UPDATE laneway.workers SET last_seen_at = now() - interval '21 seconds'"
        " WHERE owner_id = 'new'"
    )
    async with old.running():  # the old code's loop fires it at its next look: never stuck
        fired = await eventually(lambda: _fired(store), lambda rows: len(rows) == 1)
    assert [version for _, version in fired] == ["1"]


async def test_every_fire_starts_the_newest_version_while_old_and_new_workers_both_run(
    store: Store, database_url: str
) -> None:
    # The audit's rolling deploy: an API process with both versions creates the schedule and
    # runs no engine (it never fires, and is not in the workers registry); one worker has
    # only version 1, another only version 2. Every fire used to go to whichever came first.
    api = make_engine(store, ship("1"), ship("2"))
    await api.create_schedule("every-second", "ship", every="1s")
    async with open_store(database_url) as v1_store, open_store(database_url) as v2_store:
        v1 = make_engine(v1_store, ship("1"), owner_id="v1", poll_interval_seconds=0.05)
        v2 = make_engine(v2_store, ship("2"), owner_id="v2", poll_interval_seconds=0.05)
        async with v1.running(), v2.running():
            await eventually(lambda: _fired(store), lambda rows: len(rows) >= 4, timeout=20)
    fired = await _fired(store)
    assert {version for _, version in fired} == {"2"}
    assert len({key for key, _ in fired}) == len(fired)  # each occurrence once


async def test_an_idle_poll_with_no_schedule_due_does_not_read_the_workers_registry(
    store: Store,
) -> None:
    engine = make_engine(store, ship("1"), poll_interval_seconds=0.02)
    await engine.create_schedule("hourly", "ship", every="1h")
    calls = {"polls": 0, "registry reads": 0}
    real_due_work, real_live_workers = store.due_work, store.live_workers

    async def due_work(*args: Any, **kwargs: Any) -> Any:
        calls["polls"] += 1
        return await real_due_work(*args, **kwargs)

    async def live_workers(*args: Any, **kwargs: Any) -> Any:
        calls["registry reads"] += 1
        return await real_live_workers(*args, **kwargs)

    store.due_work = due_work  # type: ignore[method-assign]
    store.live_workers = live_workers  # type: ignore[method-assign]

    async def polls() -> int:
        return calls["polls"]

    async with engine.running():
        await eventually(polls, lambda n: n >= 5)
    assert calls["registry reads"] == 0
