"""Sample workflows shared by tests (also loaded by worker subprocesses via LANEWAY_WORKFLOWS)."""

import asyncio
import os
from pathlib import Path

from laneway.engine.context import Done, HandlerContext, Next
from laneway.engine.handler_map import RetryPolicy, Workflow
from laneway.engine.template_interpreter import (
    Operation,
    OperationContext,
    OperationRegistry,
    OperationResult,
    Stage,
    Template,
    compile_template,
    completed,
    failed,
)
from laneway.model import JSONValue


async def _noop(ctx: HandlerContext, params: JSONValue) -> Done:
    return Done({"ok": True})


noop = Workflow("noop", handlers={"run": _noop}, initial="run")


async def _first(ctx: HandlerContext, params: JSONValue) -> Next:
    ctx.state["first"] = True
    _ledger(ctx, "first")
    return Next("second", {"from": "first"})


async def _second(ctx: HandlerContext, params: JSONValue) -> Next | Done:
    assert ctx.state.get("first") is True
    _ledger(ctx, "second")
    hold = os.environ.get("LANEWAY_TEST_HOLD_SECOND")
    if hold:
        # The crash tests kill the worker while it sits here.
        await asyncio.sleep(float(hold))
    return Done({"steps": 2, "params": params})


two_steps = Workflow(
    "two_steps",
    handlers={"first": _first, "second": _second},
    initial="first",
    retry=RetryPolicy(max_attempts=5, backoff="fixed", base_ms=0),
)


def _ledger(ctx: HandlerContext, action: str) -> None:
    # Side-effect ledger for crash tests: one line per handler execution.
    path = os.environ.get("LANEWAY_TEST_LEDGER")
    if path:
        with Path(path).open("a") as ledger:
            ledger.write(f"{ctx.instance_id} {action} {ctx.attempt}\n")


async def _crash(ctx: HandlerContext, params: JSONValue) -> Done:
    # Poison: kills its own worker process on every attempt.
    if os.environ.get("LANEWAY_TEST_POISON") == "1":
        os._exit(137)
    return Done()


poison = Workflow(
    "poison", handlers={"run": _crash}, initial="run", retry=RetryPolicy(max_attempts=2)
)


async def _slow(ctx: HandlerContext, params: JSONValue) -> Done:
    assert isinstance(params, dict)
    await asyncio.sleep(float(params.get("seconds", 0.2)))
    return Done({"slept": params.get("seconds", 0.2)})


slow = Workflow("slow", handlers={"run": _slow}, initial="run")


# -- a template that fails at its second stage until told otherwise (retry tests) -------------

BRITTLE_STATE: dict[str, object] = {"fail": True, "prepared": 0}


async def _prepare(ctx: OperationContext) -> OperationResult:
    BRITTLE_STATE["prepared"] = int(str(BRITTLE_STATE["prepared"])) + 1
    return completed({"prepared": True})


async def _risky(ctx: OperationContext) -> OperationResult:
    if BRITTLE_STATE["fail"]:
        return failed("risky operation refused")
    return completed({"risky": "done"})


brittle = compile_template(
    Template(
        type="brittle",
        stages=[
            Stage(name="prepare", operations=[Operation(type="prepare")]),
            Stage(name="risky", operations=[Operation(type="risky", max_attempts=1)]),
        ],
    ),
    OperationRegistry({"prepare": _prepare, "risky": _risky}),
)
