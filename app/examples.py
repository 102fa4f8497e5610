"""The example workflows of the contract: `hello`, `countdown` and `flaky`.

Registered by `make run` (LANEWAY_WORKFLOWS=app.examples) and used by the API tests. Their
names, params and results are part of the GraphQL contract; change them only through an issue.
"""

import asyncio
import contextlib

from app.engine import Done, HandlerContext, Next, RetryPolicy, Workflow
from app.model import JSONValue

MAX_COUNTDOWN_STEPS = 10_000
MAX_COUNTDOWN_DELAY_MS = 3_600_000


def _object(params: JSONValue) -> dict[str, JSONValue]:
    if not isinstance(params, dict):
        raise ValueError("params must be an object")
    return params


def _integer(params: dict[str, JSONValue], key: str, low: int, high: int) -> int:
    value = params.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{key} must be an integer from {low} to {high}")
    return value


def check_hello(params: JSONValue) -> JSONValue:
    """`{"name": str}` with a name of 1-200 characters."""
    body = _object(params)
    name = body.get("name")
    if not isinstance(name, str) or not 1 <= len(name) <= 200:
        raise ValueError("name must be a string of 1-200 characters")
    return {"name": name}


async def _greet(ctx: HandlerContext, params: JSONValue) -> Done:
    body = _object(params)
    return Done({"greeting": f"Hello, {body['name']}!"})


hello = Workflow(
    "hello",
    handlers={"greet": _greet},
    initial="greet",
    validator=check_hello,
    description="Greets `name`.",
)


def check_countdown(params: JSONValue) -> JSONValue:
    """`{"n": int, "delayMs": int}`, both within bounds."""
    body = _object(params)
    return {
        "n": _integer(body, "n", 0, MAX_COUNTDOWN_STEPS),
        "delayMs": _integer(body, "delayMs", 0, MAX_COUNTDOWN_DELAY_MS),
    }


async def _tick(ctx: HandlerContext, params: JSONValue) -> Next | Done:
    body = _object(params)
    total, delay_ms = int(body["n"]), int(body["delayMs"])
    done = int(ctx.state.get("done") or 0)
    if done >= total:
        return Done({"count": total})
    # Waiting on the cancel event (not a bare sleep) ends the step as soon as a cancel arrives,
    # even where the runner could not cancel the task itself.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(ctx.cancelled.wait(), delay_ms / 1000)
    ctx.raise_if_cancelled()
    done += 1
    ctx.state["done"] = done
    ctx.report(progress=done / total, message=f"{done} of {total}")
    return Next("tick", body)


countdown = Workflow(
    "countdown",
    handlers={"tick": _tick},
    initial="tick",
    validator=check_countdown,
    description="Counts to `n`, one checkpointed step every `delayMs` milliseconds.",
)


def check_flaky(params: JSONValue) -> JSONValue:
    """`{"failTimes": int}` with 0 <= failTimes <= 100."""
    return {"failTimes": _integer(_object(params), "failTimes", 0, 100)}


async def _attempt(ctx: HandlerContext, params: JSONValue) -> Done:
    fail_times = int(_object(params)["failTimes"])
    if ctx.attempt <= fail_times:
        raise RuntimeError(f"flaky failure {ctx.attempt}")
    return Done({"attempts": ctx.attempt})


flaky = Workflow(
    "flaky",
    handlers={"attempt": _attempt},
    initial="attempt",
    retry=RetryPolicy(max_attempts=3, backoff="fixed", base_ms=100),
    validator=check_flaky,
    description="Fails its first `failTimes` attempts, then completes.",
)
