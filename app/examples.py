"""The example workflows of the contract: `hello`, `countdown`, `flaky`, the `report` template, and
the waits `nap`, `approval` and `review`.

Registered by `make run` (app/main.py) and by `make worker` (LANEWAY_WORKFLOWS=app.examples). Their
names, params and results are part of the GraphQL contract; change them only through an issue.
"""

import asyncio
import contextlib

from laneway.engine import (
    Checkpoint,
    Done,
    HandlerContext,
    Next,
    Operation,
    OperationContext,
    OperationRegistry,
    OperationResult,
    Pause,
    RetryPolicy,
    Sleep,
    Stage,
    Template,
    WaitForSignal,
    Workflow,
    compile_template,
    completed,
)
from laneway.model import JSONValue

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


# -- the `report` template: gather → analyze (3 parallel operations) → generate ------------------

MAX_REPORT_DELAY_MS = 60_000


def check_report(params: JSONValue) -> JSONValue:
    """`{"topic"?: str, "review"?: bool, "delayMs"?: int}`; the initial context of a report."""
    body = _object({} if params is None else params)
    topic = body.get("topic", "laneway")
    if not isinstance(topic, str) or not 1 <= len(topic) <= 200:
        raise ValueError("topic must be a string of 1-200 characters")
    review = body.get("review", False)
    if not isinstance(review, bool):
        raise ValueError("review must be true or false")
    delay_ms = _integer(body, "delayMs", 0, MAX_REPORT_DELAY_MS) if "delayMs" in body else 0
    return {"topic": topic, "review": review, "delayMs": delay_ms}


async def _pause_for(ctx: OperationContext) -> None:
    # Demo pacing (dashboards can watch the stages go by); ends early on cancel.
    delay_ms = ctx.context.get("delayMs") or 0
    if isinstance(delay_ms, int) and delay_ms > 0:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ctx.cancelled.wait(), delay_ms / 1000)


async def _collect(ctx: OperationContext) -> OperationResult:
    await _pause_for(ctx)
    topic = str(ctx.context["topic"])
    return completed({"documents": [f"{topic} notes {i}" for i in range(1, 4)]})


def _documents(ctx: OperationContext) -> list[str]:
    documents = ctx.context.get("documents")
    return [str(d) for d in documents] if isinstance(documents, list) else []


async def _count_words(ctx: OperationContext) -> OperationResult:
    await _pause_for(ctx)
    return completed({"words": sum(len(d.split()) for d in _documents(ctx))})


async def _score_sentiment(ctx: OperationContext) -> OperationResult:
    await _pause_for(ctx)
    return completed({"sentiment": "neutral"})


async def _find_topics(ctx: OperationContext) -> OperationResult:
    await _pause_for(ctx)
    return completed({"topics": sorted({d.split()[0] for d in _documents(ctx)})})


async def _render(ctx: OperationContext) -> OperationResult:
    await _pause_for(ctx)
    words, topics = ctx.context.get("words"), ctx.context.get("topics")
    return completed({"summary": f"{ctx.context['topic']}: {words} words on {topics}"})


report_operations = OperationRegistry(
    {
        "collect": _collect,
        "count_words": _count_words,
        "score_sentiment": _score_sentiment,
        "find_topics": _find_topics,
        "render": _render,
    }
)

report = compile_template(
    Template(
        type="report",
        description="Gathers documents, analyzes them in parallel, and writes a summary; "
        "pauses at `data_ready` for review when `review` is true, then greets `hello`.",
        estimated_seconds=1,
        stages=[
            Stage(name="gather", operations=[Operation(type="collect", timeout_seconds=120)]),
            Stage(
                name="analyze",
                parallel=True,
                operations=[
                    Operation(type="count_words", timeout_seconds=120),
                    Operation(type="score_sentiment", timeout_seconds=120),
                    Operation(type="find_topics", timeout_seconds=120),
                ],
            ),
            Stage(name="generate", operations=[Operation(type="render", timeout_seconds=120)]),
        ],
        checkpoints=[
            Checkpoint(
                after_stage="gather",
                label="data_ready",
                condition=lambda context: context.get("review") is True,
            )
        ],
        next_workflow="hello",
        next_params={"name": "report"},
        validator=check_report,
    ),
    report_operations,
)


# -- waits: a durable sleep, a signal with a timeout, a review decision with an input schema --

MAX_WAIT_EXAMPLE_SECONDS = 30 * 86_400  # a month


def _seconds(params: JSONValue, key: str) -> float:
    value = _object(params).get(key)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value <= MAX_WAIT_EXAMPLE_SECONDS
    ):
        raise ValueError(f"{key} must be a number of seconds from 0 to {MAX_WAIT_EXAMPLE_SECONDS}")
    return value


def check_nap(params: JSONValue) -> JSONValue:
    """`{"seconds": number}`, 0 to a month."""
    return {"seconds": _seconds(params, "seconds")}


async def _nap(ctx: HandlerContext, params: JSONValue) -> Sleep:
    seconds = _object(params)["seconds"]
    assert isinstance(seconds, int | float)
    return Sleep(seconds, "woke", {"slept": seconds})


async def _woke(ctx: HandlerContext, params: JSONValue) -> Done:
    return Done(params)


nap = Workflow(
    "nap",
    handlers={"nap": _nap, "woke": _woke},
    initial="nap",
    validator=check_nap,
    description="Sleeps `seconds` durably (no lease, no slot), then completes with `slept`.",
)


def check_approval(params: JSONValue) -> JSONValue:
    """`{"timeoutSeconds": number}`, 0 to a month."""
    return {"timeoutSeconds": _seconds(params, "timeoutSeconds")}


async def _await_approval(ctx: HandlerContext, params: JSONValue) -> WaitForSignal:
    timeout = _object(params)["timeoutSeconds"]
    assert isinstance(timeout, int | float)
    return WaitForSignal("approve", timeout, "approved", on_timeout="timed_out")


async def _approved(ctx: HandlerContext, params: JSONValue) -> Done:
    return Done({"approved": True, "payload": params})


async def _timed_out(ctx: HandlerContext, params: JSONValue) -> Done:
    return Done({"approved": False, "timedOut": True})


approval = Workflow(
    "approval",
    handlers={"wait": _await_approval, "approved": _approved, "timed_out": _timed_out},
    initial="wait",
    validator=check_approval,
    description="Waits up to `timeoutSeconds` for the signal `approve`; completes with its "
    "payload, or as timed out.",
)

REVIEW_INPUT_SCHEMA: dict[str, JSONValue] = {
    "type": "object",
    "required": ["decision"],
    "properties": {
        "decision": {"enum": ["approve", "reject"]},
        "comment": {"type": "string"},
    },
    "additionalProperties": False,
}


async def _ask_for_review(ctx: HandlerContext, params: JSONValue) -> Pause:
    ctx.report(message="waiting for a decision")
    return Pause("decide", "decided", input_schema=REVIEW_INPUT_SCHEMA)


async def _decided(ctx: HandlerContext, params: JSONValue) -> Done:
    decision = _object(params)
    return Done({"decision": decision["decision"], "comment": decision.get("comment")})


review = Workflow(
    "review",
    handlers={"ask": _ask_for_review, "decided": _decided},
    initial="ask",
    description="Pauses at `decide` for a decision (approve or reject, with a comment) "
    "checked against its input schema, then completes with it.",
)
