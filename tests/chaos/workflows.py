"""The chaos workflows (docs/reliability.md, "The harness"): W3, WP, and the poison pill.

Loaded by worker subprocesses through LANEWAY_WORKFLOWS=tests.chaos.workflows. Every step
first writes a ledger row (tests/chaos/ledger.py) on its own autocommit connection, then
"works" for U(step_ms) milliseconds, then checkpoints. The result is an oracle: the steps the
instance's checkpointed state went through, which must be exactly one, two, three.

Params (all optional): `n` (echoed in the result), `step_ms` ([low, high], default [5, 50]),
`poison` (step two SIGKILLs its own worker, on every attempt), `hold_tx_s` (step one holds a
database transaction idle that long, on its first attempt only: the P-05 test).
LANEWAY_CHAOS_BUSY_THREADS=N starts N CPU-bound threads in the worker (S-12).
"""

import asyncio
import os
import random
import signal
import threading

from laneway.config import Settings
from laneway.engine.context import Done, HandlerContext, Next, Pause
from laneway.engine.handler_map import RetryPolicy, Workflow
from laneway.model import JSONValue
from laneway.store.pool import Timeouts, connect
from tests.chaos.ledger import LedgerWriter

STEPS = ("one", "two", "three")
LEDGER = LedgerWriter()


def _spin() -> None:
    value = 0
    while True:  # pure Python: holds the GIL a switch interval at a time, like CPU-bound code
        value = (value * 31 + 7) % 1_000_003


def start_busy_threads(count: int) -> None:
    """S-12: CPU-bound threads beside the event loop, for the life of the process."""
    for index in range(count):
        threading.Thread(target=_spin, name=f"chaos-busy-{index}", daemon=True).start()


start_busy_threads(int(os.environ.get("LANEWAY_CHAOS_BUSY_THREADS") or 0))


def expected_result(params: JSONValue) -> JSONValue:
    """What a W3 or WP instance with `params` ends with when nothing went wrong."""
    n = params.get("n") if isinstance(params, dict) else None
    return {"n": n, "steps": list(STEPS)}


def _options(ctx: HandlerContext) -> dict[str, JSONValue]:
    original = ctx.state.get("params")
    return original if isinstance(original, dict) else {}


async def _work(ctx: HandlerContext, step: str) -> None:
    options = _options(ctx)
    await LEDGER.record(ctx.instance_id, step, ctx.attempt)
    if step == "two" and options.get("poison"):
        # Only a worker the chaos supervisor started may die here; elsewhere it is a failure.
        if os.environ.get("LANEWAY_CHAOS_WORKER") != "1":
            raise RuntimeError("poison instance outside a chaos worker")
        os.kill(os.getpid(), signal.SIGKILL)
    low, high = options.get("step_ms") or (5, 50)
    await asyncio.sleep(random.uniform(float(low), float(high)) / 1000.0)
    steps = ctx.state.setdefault("steps", [])
    assert isinstance(steps, list)
    steps.append(step)


async def _one(ctx: HandlerContext, params: JSONValue) -> Next | Pause:
    ctx.state["params"] = params
    hold = _options(ctx).get("hold_tx_s")
    if hold and ctx.attempt == 1:
        await _hold_transaction(float(hold))
    await _work(ctx, "one")
    if ctx.name == "wp":
        return Pause("review", "two")
    return Next("two")


async def _two(ctx: HandlerContext, params: JSONValue) -> Next:
    await _work(ctx, "two")
    return Next("three")


async def _three(ctx: HandlerContext, params: JSONValue) -> Done:
    await _work(ctx, "three")
    return Done({"n": _options(ctx).get("n"), "steps": ctx.state.get("steps")})


async def _hold_transaction(seconds: float) -> None:
    # A step that leaves a transaction idle on a connection made the engine's way, with the
    # worker's configured role timeouts: the server must end it, and the attempt fails.
    settings = Settings.from_env(os.environ)
    timeouts = Timeouts.from_seconds(
        statement=settings.statement_timeout_seconds,
        lock=settings.lock_timeout_seconds,
        idle_in_transaction=settings.idle_in_transaction_timeout_seconds,
    )
    url = os.environ["DATABASE_URL"]
    conn = await connect(url, application_name="chaos-step-holder", timeouts=timeouts)
    try:
        await conn.execute("BEGIN")
        await asyncio.sleep(seconds)
        await conn.execute("COMMIT")  # the server has ended the session by now
    finally:
        await conn.close()


RETRY = RetryPolicy(max_attempts=20, backoff="fixed", base_ms=50)
w3 = Workflow(
    "w3", handlers={"one": _one, "two": _two, "three": _three}, initial="one", retry=RETRY
)
wp = Workflow(
    "wp", handlers={"one": _one, "two": _two, "three": _three}, initial="one", retry=RETRY
)
