"""What a failed instance shows of where it failed: its progress and status line.

A template's failure carries the report of the stage that failed (its operations done and
failed, worded as the stage's own reports are) onto the instance, whether the attempt is
retried or final (migration 0036); a handler map's failure carries what its failing step
reported (stage, progress, status line), the rest staying as its last checkpoint saved them.
"""

from collections.abc import Mapping
from typing import Any

import pytest

from laneway.engine import HandlerContext, Next, RetryPolicy, Workflow
from laneway.engine.template import (
    Operation,
    OperationContext,
    OperationRegistry,
    OperationResult,
    Stage,
    Template,
    completed,
    failed,
    stage_progress,
)
from laneway.engine.template_interpreter import compile_template
from laneway.model import InstanceRecord, JSONValue, Status
from laneway.store import Store
from tests.engine.helpers import make_engine

RETRY_ONCE = RetryPolicy(max_attempts=2, backoff="fixed", base_ms=0)


def _fast(operation_type: str, **options: Any) -> Operation:
    """An operation whose in-stage retries do not wait."""
    return Operation(type=operation_type, retry_base_ms=0, retry_max_ms=0, **options)


async def _ok(ctx: OperationContext) -> OperationResult:
    return completed({ctx.operation_type: True})


async def _declined(ctx: OperationContext) -> OperationResult:
    return failed("declined by the bank")


def _raises(context: Mapping[str, JSONValue]) -> bool:
    raise RuntimeError("the condition's own bug")


OPERATIONS = OperationRegistry({"ok": _ok, "other": _ok, "decline": _declined})


def _shown(record: InstanceRecord | None) -> tuple[object, ...]:
    """What workflowInstance, `laneway status` and the dashboard show of where it stands."""
    assert record is not None
    return record.status, record.stage, record.message, record.progress


async def test_a_template_failing_in_its_second_stage_shows_that_stages_report(
    store: Store,
) -> None:
    template = Template(
        type="second_fails",
        stages=[
            Stage(name="first", operations=[_fast("ok")]),
            Stage(
                name="mid",
                operations=[_fast("ok"), _fast("decline", max_attempts=1), _fast("other")],
            ),
            Stage(name="last", operations=[_fast("ok")]),
        ],
        retry=RetryPolicy(max_attempts=1),
    )
    engine = make_engine(store, compile_template(template, OPERATIONS))
    enqueued = await engine.enqueue("second_fails")
    await engine.tick()
    # In sequence: `ok` completed, `decline` failed and stopped the stage before `other`. The
    # bar shows the one done (it counted the failed one too: a failed last stage read 100%).
    mid = ("mid", "mid: 1 of 3 operations done (1 failed)", pytest.approx((1 + 1 / 3) / 3))
    assert _shown(await engine.get(enqueued.instance_id)) == (Status.FAILED, *mid)
    await engine.retry(enqueued.instance_id)
    assert _shown(await engine.get(enqueued.instance_id)) == (Status.PENDING, *mid)
    await engine.tick()
    assert _shown(await engine.get(enqueued.instance_id)) == (Status.FAILED, *mid)


async def test_a_retried_template_attempt_shows_its_stages_report_until_it_fails(
    store: Store,
) -> None:
    # A condition that raises is the user's code failing: an attempt, retried by the policy.
    template = Template(
        type="condition_raises",
        stages=[
            Stage(name="first", operations=[_fast("ok")]),
            Stage(name="mid", operations=[_fast("ok"), _fast("other", condition=_raises)]),
            Stage(name="last", operations=[_fast("ok")]),
        ],
        retry=RETRY_ONCE,
    )
    engine = make_engine(store, compile_template(template, OPERATIONS))
    enqueued = await engine.enqueue("condition_raises")
    mid = ("mid", "mid: 1 of 2 operations done", pytest.approx(stage_progress(1, 3, 1, 2)))
    await engine.tick()
    assert _shown(await engine.get(enqueued.instance_id)) == (Status.PENDING, *mid)
    await engine.tick()
    assert _shown(await engine.get(enqueued.instance_id)) == (Status.FAILED, *mid)


async def test_a_template_failing_in_its_first_stage_shows_its_report(store: Store) -> None:
    template = Template(
        type="first_fails",
        stages=[
            Stage(name="first", operations=[_fast("decline", max_attempts=1)]),
            Stage(name="last", operations=[_fast("ok")]),
        ],
    )
    engine = make_engine(store, compile_template(template, OPERATIONS))
    enqueued = await engine.enqueue("first_fails")
    await engine.tick()
    assert _shown(await engine.get(enqueued.instance_id)) == (
        Status.FAILED,
        "first",
        "first: 0 of 1 operations done (1 failed)",
        0.0,  # none done: it read 50%, half the instance's way
    )


async def test_a_failed_last_stage_counts_its_done_and_skipped_operations_not_the_failed(
    store: Store,
) -> None:
    template = Template(
        type="last_fails",
        stages=[
            Stage(name="first", operations=[_fast("ok")]),
            Stage(
                name="last",
                operations=[
                    _fast("ok"),
                    _fast("other", condition=lambda context: False),
                    _fast("decline", max_attempts=1),
                ],
            ),
        ],
    )
    engine = make_engine(store, compile_template(template, OPERATIONS))
    enqueued = await engine.enqueue("last_fails")
    await engine.tick()
    # A skipped operation counts as a stage's end counts it (the whole stage done); it showed
    # 100% beside the failure, which reads as done.
    assert _shown(await engine.get(enqueued.instance_id)) == (
        Status.FAILED,
        "last",
        "last: 1 of 3 operations done (1 failed, 1 skipped)",
        pytest.approx((1 + 2 / 3) / 2),
    )


async def _reports_then_goes_on(ctx: HandlerContext, params: JSONValue) -> Next:
    ctx.report(progress=0.25, message="charged")
    return Next("ship")


async def _reports_then_raises(ctx: HandlerContext, params: JSONValue) -> Next:
    ctx.report(progress=0.75, message="shipping", stage="shipment")
    raise RuntimeError("the courier is gone")


async def _raises_at_once(ctx: HandlerContext, params: JSONValue) -> Next:
    raise RuntimeError("the courier is gone")


@pytest.mark.parametrize(
    ("failing", "shown"),
    [
        # Its stage, progress and status line, as far as it got: not the stage it failed in
        # beside the status line of the step before (as until 0.3.10)
        (_reports_then_raises, ("shipment", "shipping", 0.75)),
        (_raises_at_once, (None, "charged", 0.25)),  # reported nothing: the checkpoint's stay
    ],
)
async def test_a_handler_map_failure_shows_what_the_failing_step_reported(
    store: Store, failing: Any, shown: tuple[object, ...]
) -> None:
    workflow = Workflow(
        "reporting",
        handlers={"charge": _reports_then_goes_on, "ship": failing},
        initial="charge",
        retry=RETRY_ONCE,
    )
    engine = make_engine(store, workflow)
    enqueued = await engine.enqueue("reporting")
    await engine.tick()  # charge, then ship's first attempt: retried
    assert _shown(await engine.get(enqueued.instance_id)) == (Status.PENDING, *shown)
    await engine.tick()
    assert _shown(await engine.get(enqueued.instance_id)) == (Status.FAILED, *shown)
