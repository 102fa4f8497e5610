"""Rates that hold: the claim loop wakes when a rate-limited queue's or key's next token is due.

Measured on the database's own claim timestamps, with two engines (two owner ids, two pools)
sharing each queue and the default 2 s fallback poll, which alone would give ~34/min at 60/min.
"""

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import pytest

from laneway.engine import Done, Engine, HandlerContext, Workflow
from laneway.engine.requests import EnqueueRequest
from laneway.store import Store, open_store
from tests.engine.helpers import eventually, make_engine

WINDOW_SECONDS = 30.0
TOLERANCE = 0.05


async def _done(ctx: HandlerContext, params: object) -> Done:
    return Done()


slow = Workflow("slow", handlers={"run": _done}, initial="run", queue="slow")
fast = Workflow("fast", handlers={"run": _done}, initial="run", queue="fast")
per_key = Workflow("per_key", handlers={"run": _done}, initial="run", queue="per_key")
plain = Workflow("plain", handlers={"run": _done}, initial="run", queue="plain")


def count_calls(monkeypatch: pytest.MonkeyPatch, store: Store, method: str) -> list[float]:
    """Record when each call of `store.method` was made; the real method still runs."""
    calls: list[float] = []
    real: Callable[..., Awaitable[Any]] = getattr(store, method)

    async def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(asyncio.get_running_loop().time())
        return await real(*args, **kwargs)

    monkeypatch.setattr(store, method, counted)
    return calls


async def _started_per_queue(store: Store) -> dict[str, int]:
    async with store.connection() as conn:
        rows = await conn.fetch(
            "SELECT queue, count(*) AS n FROM laneway.instances"
            " WHERE claimed_at IS NOT NULL GROUP BY queue"
        )
    return {row["queue"]: row["n"] for row in rows}


async def _claimed_at(store: Store, queue: str) -> list[datetime]:
    async with store.connection() as conn:
        rows = await conn.fetch(
            "SELECT claimed_at FROM laneway.instances"
            " WHERE queue = $1 AND claimed_at IS NOT NULL ORDER BY claimed_at",
            queue,
        )
    return [row["claimed_at"] for row in rows]


def _observed_per_minute(starts: list[datetime], burst: int, per_second: float) -> float:
    """Starts per minute over the window's worth of tokens refilled after the initial burst.

    starts[burst] is the first start that needed a refilled token; the next
    `WINDOW_SECONDS * per_second` starts each need one more.
    """
    intervals = round(WINDOW_SECONDS * per_second)
    span = (starts[burst + intervals] - starts[burst]).total_seconds()
    return intervals / span * 60.0


async def test_rates_hold_at_60_and_600_per_minute_across_two_engines(
    store: Store, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (queue, rate per minute, burst: the bucket's capacity, max(1 s of tokens, 1 token));
    # per_key's rate is its one key's (keyRatePerMinute), its queue has no rate of its own.
    rates = {"slow": (60.0, 1), "fast": (600.0, 10), "per_key": (60.0, 1)}
    setup = make_engine(store, slow, fast, per_key)
    for queue, (rate, _) in rates.items():
        if queue == "per_key":
            await setup.configure_queue(queue, concurrency=100, key_rate_per_minute=rate)
        else:
            await setup.configure_queue(queue, concurrency=100, rate_per_minute=rate)
    needed = {
        q: burst + round(WINDOW_SECONDS * rate / 60.0) + 1 for q, (rate, burst) in rates.items()
    }
    await setup.enqueue_many(
        [
            EnqueueRequest(
                name=q, params={"i": i}, concurrency_key="tenant" if q == "per_key" else None
            )
            for q in needed
            for i in range(needed[q])
        ]
    )
    async with open_store(database_url) as other_store:
        claims = [count_calls(monkeypatch, s, "claim_rung") for s in (store, other_store)]
        token_reads = [count_calls(monkeypatch, s, "next_token_due") for s in (store, other_store)]
        # The default fallback poll (2 s): only the token wake-ups can hold these rates.
        first = make_engine(store, slow, fast, per_key, owner_id="rates-a")
        second = make_engine(other_store, slow, fast, per_key, owner_id="rates-b")
        assert first.claim_loop.poll_interval_seconds == 2.0
        async with first.running(), second.running():
            await eventually(
                lambda: _started_per_queue(store),
                lambda started: all(started.get(q, 0) >= n for q, n in needed.items()),
                timeout=WINDOW_SECONDS + 20,
            )
    for queue, (rate, burst) in rates.items():
        starts = await _claimed_at(store, queue)
        observed = _observed_per_minute(starts, burst, rate / 60.0)
        assert abs(observed - rate) <= TOLERANCE * rate, (queue, observed)
    # No spinning. Per token, the winner claims once more to find the bucket empty and reads
    # when the next token is due; the loser, which found the queue locked, reads "a token is
    # there" (the winner has not committed), backs off 5 ms, claims and reads again: about 4
    # claims and 3 reads per start (measured), where a spin would be hundreds a second.
    started = sum(needed.values())
    claimed_total = sum(len(c) for c in claims)
    read_total = sum(len(r) for r in token_reads)
    assert claimed_total <= 8 * started, (claimed_total, started)
    assert read_total <= 6 * started, (read_total, started)


async def test_idle_engine_without_rate_limits_claims_and_reads_no_more_than_before(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup = make_engine(store, plain)
    await setup.configure_queue("plain", concurrency=10)
    polls = count_calls(monkeypatch, store, "due_work")
    claims = count_calls(monkeypatch, store, "claim_rung")
    token_reads = count_calls(monkeypatch, store, "next_token_due")
    engine: Engine = make_engine(store, plain, owner_id="idle", poll_interval_seconds=0.05)
    async with engine.running():
        # Idle: one poll per interval and, apart from the first round, no claim at all.
        await eventually(lambda: _length(polls), lambda n: n >= 10, timeout=10)
        assert len(claims) <= 1, len(claims)
        assert len(token_reads) <= 1, len(token_reads)
        # Woken over and over (doorbells of other processes' claims): each wake claims, as
        # before, but with no rate-limited queue the token read stays at one per poll interval.
        polls_before, reads_before = len(polls), len(token_reads)

        async with asyncio.timeout(10):
            while len(polls) - polls_before < 10:
                engine.claim_loop.wake()
                await asyncio.sleep(0.002)  # a wake every 2 ms until ten polls went by
        polls_during = len(polls) - polls_before
        reads_during = len(token_reads) - reads_before
    assert len(claims) > polls_during * 2  # the wakes did make it claim many times
    assert reads_during <= polls_during + 1, (reads_during, polls_during)


async def _length(calls: list[float]) -> int:
    return len(calls)


async def test_next_token_due_follows_the_claims_bucket(store: Store) -> None:
    engine = make_engine(store, plain, slow, owner_id="reader")
    await engine.configure_queue("plain", concurrency=10)
    token = await store.next_token_due(["plain@1", "slow@1"])
    assert (token.rate_limited, token.due_in) == (False, None)
    await engine.configure_queue("slow", concurrency=10, rate_per_minute=60.0)
    token = await store.next_token_due(["plain@1", "slow@1"])
    assert (token.rate_limited, token.due_in) == (True, None)  # nothing waits in it
    await engine.enqueue_many([EnqueueRequest(name="slow") for _ in range(2)])
    assert (await store.next_token_due(["slow@1"])).due_in == 0.0  # the bucket holds one
    assert (await store.next_token_due(["plain@1"])).due_in is None  # not registered here
    claimed, _ = await engine.claim_loop.claim()
    assert len(claimed) == 1  # the one token
    due_in = (await store.next_token_due(["slow@1"])).due_in
    assert due_in is not None
    assert 0.5 < due_in <= 1.0  # a token a second
    await engine.configure_queue("slow", concurrency=1, rate_per_minute=60.0)
    assert (await store.next_token_due(["slow@1"])).due_in is None  # full: no token wake-up
