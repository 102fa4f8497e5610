"""Runner: drives one claimed instance handler by handler.

Owns the step loop (handler → checkpoint → next handler), failure handling and lease fencing,
and the log line of a failed instance (log_failure; due_work.py logs those no handler ended).
The tools a handler is given are runner_tools.py's RunnerTools, which keep a template's
operation outcomes until the instance's next write carries them. Every write goes through the
Committer (committer.py: group commit). Claiming is claim_loop.py's job.
"""

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from laneway.engine import faults, tracing
from laneway.engine.committer import Committer
from laneway.engine.context import (
    Done,
    HandlerContext,
    Next,
    Pause,
    PermanentFailure,
    Sleep,
    StoppedForDrainError,
    WaitForSignal,
    stopped_here,
)
from laneway.engine.failures import failure_of
from laneway.engine.handler_map import Workflow, start_handler
from laneway.engine.observer import EngineObserver
from laneway.engine.payloads import (
    MAX_PAYLOAD_BYTES,
    MAX_STATE_BYTES,
    decode_json,
    encode_json,
)
from laneway.engine.record_builders import builder
from laneway.engine.runner_tools import RunnerTools
from laneway.engine.waits import with_retry
from laneway.errors import InvalidInputError, LeaseLostError, StepWriteRefusedError
from laneway.model import (
    InstanceRecord,
    JSONValue,
    Status,
    Transition,
)
from laneway.store.pool import DATABASE_GONE
from laneway.writes import (
    CheckpointWrite,
    CompleteWrite,
    FailWrite,
    OperationOutcome,
    StepWrite,
)

logger = logging.getLogger(__name__)

# One per step that goes on or ends (record_builders.py): half the cost of their constructors.
_new_checkpoint = builder(CheckpointWrite)
_new_completion = builder(CompleteWrite)


@dataclass(slots=True, kw_only=True)
class Run:
    """One instance running in this process."""

    record: InstanceRecord
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    task: "asyncio.Task[None] | None" = None
    claimed_by: str | None = None  # the span of the claim that started it (tracing.py)
    # Set when the process stops (Presence.drain): the run ends at its next checkpoint, and
    # its handler sees it (HandlerContext.draining: a sequential stage stops between operations).
    draining: asyncio.Event = field(default_factory=asyncio.Event)
    # Stopped at a checkpoint (or between a sequential stage's operations) while draining;
    # leased until released.
    handed_back: bool = False
    # The write that ends this run here committed (terminal, paused, retry pending): the lease
    # is gone on purpose, so a renewal that misses it must not stop the run's last steps.
    settled: bool = False
    # A step's outcome is with the committer: it may commit (and end the lease) before this
    # run learns so; the write is fenced by its lease epoch, so it, not a renewal, tells.
    writing: bool = False


@dataclass(frozen=True, slots=True)
class DueAgain:
    """When the instance a run left is due again: after a failed attempt's backoff (claimable
    then), or at a wait's wake time (`waking`: a wake-up makes it claimable)."""

    seconds: float
    waking: bool = False


async def run_instance(
    run: Run,
    workflow: Workflow,
    committer: Committer,
    on_terminal: Callable[[Transition], Awaitable[None]],
    tools: RunnerTools,
    observe: EngineObserver,
    *,
    trace_steps: bool,
) -> DueAgain | None:
    """Drive one claimed instance until it ends, pauses, waits, fails an attempt, or loses its
    lease; each step in a span when `trace_steps` (the engine's settings).

    Returns when the instance is due again where that is known: a failed attempt left it
    pending (its retry backoff), or it waits with a wake time (a sleep, a timeout, an expiry).
    """
    record = run.record
    state: dict[str, object] = dict(record.state)
    action = record.next_action or workflow.initial
    params = record.next_params
    attempt = record.step_attempt
    stage = record.stage
    while True:
        ctx = HandlerContext(
            instance_id=record.instance_id,
            name=record.name,
            action=action,
            attempt=attempt,
            max_attempts=record.max_attempts,
            params=params,
            state=state,
            cancelled=run.cancelled,
            draining=run.draining,
            stage=stage,
            tools=tools,
        )
        if faults.ARMED:
            await faults.hit("before_step")
        started = time.perf_counter()
        with tracing.step_span(
            record, workflow.name, action, run.claimed_by, on=trace_steps
        ) as traced:
            try:
                write = await _call_handler(
                    ctx, workflow, action, record.lease_epoch, tools, traced=traced is not None
                )
            except LeaseLostError:
                return None
            except StoppedForDrainError:
                # Stopped early for the drain, what it finished written: nothing to write for
                # the step, whose instance is handed back as at a checkpoint (Presence).
                run.handed_back = True
                return None
            if traced is not None and (
                isinstance(write, FailWrite) or record.trace_context is None
            ):
                # Its first traced step's context becomes the instance's when its enqueue left
                # none, carried by this write: its later steps join this trace.
                write = dataclasses.replace(write, trace=traced)
        observe.step_finished(workflow.name, action, time.perf_counter() - started)
        parked = isinstance(write, CheckpointWrite) and (
            write.pause_label is not None or write.wait_json is not None
        )
        if faults.ARMED and parked:
            await faults.hit("pause_transition")
        run.writing = True
        try:
            write, transition = await _written(committer, write, workflow)
        except LeaseLostError:
            # Another process holds the instance now and runs this step again: worth seeing.
            logger.warning(
                "write fenced out", extra={"instance_id": str(record.instance_id), "action": action}
            )
            return None
        except DATABASE_GONE as exc:
            # A blip (a restart, a dropped connection): hand the instance back once the
            # database answers, rather than leave it to wait out its lease.
            logger.warning(
                "write failed, the database is gone; handing the instance back",
                extra={"instance_id": str(record.instance_id), "error": repr(exc)},
            )
            run.settled = True
            handed = await committer.hand_back(record.instance_id, record.lease_epoch)
            logger.info(
                "instance handed back" if handed else "hand-back gave up; the lease recovers it",
                extra={"instance_id": str(record.instance_id)},
            )
            return None
        finally:
            run.writing = False
        if isinstance(write, FailWrite):
            log_failure(transition, write.error, action=action, traceback=write.traceback)
        if isinstance(write, FailWrite | CompleteWrite):
            observe.transitioned(transition)
        if isinstance(write, FailWrite) and transition.status == Status.PENDING:
            run.settled = True
            return DueAgain(write.delay_ms / 1000.0)
        if not isinstance(write, CheckpointWrite) or parked:
            run.settled = True
            if transition.status.is_terminal:
                await on_terminal(transition)
            return _wake_of(write)
        if run.draining.is_set():
            # Shutting down: the step is recorded, the next one is another process's.
            run.handed_back = True
            return None
        if write.trace is not None:  # kept with the instance now (see above): so here too
            record = dataclasses.replace(record, trace_context=write.trace)
        stage = ctx.stage
        # The state the checkpoint wrote: the handler may have given ctx.state a new dict.
        state = ctx.state
        # The next handler gets exactly what was checkpointed, as the database gives it back
        # (decode_json: jsonb's key order and numbers), so an uninterrupted instance and one
        # resumed after a crash see the same params.
        params_json = write.next_params_json
        action, attempt = write.next_action, 1
        params = None if params_json == "null" else decode_json(params_json)


async def _written(
    committer: Committer, write: StepWrite, workflow: Workflow
) -> tuple[StepWrite, Transition]:
    """Write a step's outcome; one the database refused for what it held (the committer wrote
    its batch-mates apart) is written as the failed attempt it becomes instead. Returns what
    was written and its transition; a refusal of that failure too is raised."""
    try:
        return write, await committer.write(write)
    except StepWriteRefusedError as refusal:
        failed = _failed_attempt(write, refusal, workflow)
        logger.warning(
            "step write refused; the attempt fails",
            extra={"instance_id": str(write.instance_id), "error": failed.error},
        )
        return failed, await committer.write(failed)


def _failed_attempt(
    write: StepWrite, refusal: StepWriteRefusedError, workflow: Workflow
) -> FailWrite:
    """The failed attempt a refused write becomes: the database's reason, the step's report
    (its stage, progress and status line, as any failed attempt carries them), no operation
    outcomes (one of them may be what it refused; an operation not recorded runs again)."""
    failure = failure_of(refusal)
    if isinstance(write, FailWrite):
        progress, report = write.progress, write.report
    else:  # a completion's progress is 1 by its end: not the failed attempt's
        progress = write.progress if isinstance(write, CheckpointWrite) else None
        report = write.message
    return FailWrite(
        instance_id=write.instance_id,
        attempt=write.attempt,
        epoch=write.epoch,
        error=failure.last_error,
        delay_ms=workflow.retry.delay_ms(write.attempt),
        type=failure.type,
        message=failure.message,
        stage=write.stage,
        trace=write.trace,
        progress=progress,
        report=report,
    )


def _wake_of(write: StepWrite) -> DueAgain | None:
    """The wake time of the wait a write parked its instance in, if it has one."""
    if not isinstance(write, CheckpointWrite) or write.wait_json is None:
        return None
    seconds = json.loads(write.wait_json).get("seconds")
    return None if seconds is None else DueAgain(float(seconds), waking=True)


def _continuation(
    step: Next | Pause | Sleep | WaitForSignal,
) -> tuple[str, JSONValue, str | None]:
    """The action a step goes on with, its params (a signal's payload replaces them), and the
    action that runs on a timeout."""
    if isinstance(step, Next | Pause):
        return step.action, step.params, None
    if isinstance(step, Sleep):
        return step.then, step.params, None
    return step.then, None, step.on_timeout


def _check_actions(workflow: Workflow, action: str, *names: str | None) -> None:
    for name in names:
        if name is not None and name not in workflow.handlers:
            raise InvalidInputError(f"handler {action!r} returned unknown action {name!r}")


async def _call_handler(
    ctx: HandlerContext,
    workflow: Workflow,
    action: str,
    epoch: int,
    tools: RunnerTools,
    *,
    traced: bool,
) -> StepWrite:
    """Call one handler and turn its outcome into the write (fenced by `epoch`) that records it,
    with the operation outcomes it recorded that are not written yet. `traced`: the call runs
    in its step's span (tracing.step_span), which a failure marks."""
    handler = workflow.handlers.get(action)
    operations: tuple[OperationOutcome, ...] = ()
    try:
        if handler is None:
            raise InvalidInputError(f"workflow {workflow.name!r} has no action {action!r}")
        step = await start_handler(handler, ctx, workflow.name)
        operations = await tools.carried()
        workflow.check_state(ctx.state)
        if isinstance(step, Next | Pause | Sleep | WaitForSignal):
            next_action, next_params, on_timeout = _continuation(step)
            _check_actions(workflow, action, next_action, on_timeout)
            wait = None if isinstance(step, Next) else step.wait()
            if wait is not None:
                retried = workflow.retry_params(action, ctx.params, ctx.state)
                wait = with_retry(wait, action, retried)
            return _new_checkpoint(
                instance_id=ctx.instance_id,
                attempt=ctx.attempt,
                epoch=epoch,
                state_json=encode_json(ctx.state, what="state", max_bytes=MAX_STATE_BYTES),
                next_action=next_action,
                next_params_json=encode_json(next_params, what="action params"),
                progress=ctx.progress,
                message=ctx.message,
                stage=ctx.stage,
                pause_label=step.label if isinstance(step, Pause) else None,
                wait_json=None if wait is None else encode_json(wait, what="wait"),
                operations=operations,
            )
        if isinstance(step, Done):
            return _new_completion(
                instance_id=ctx.instance_id,
                attempt=ctx.attempt,
                epoch=epoch,
                result_json=encode_json(step.result, what="result", max_bytes=MAX_PAYLOAD_BYTES),
                state_json=encode_json(ctx.state, what="state", max_bytes=MAX_STATE_BYTES),
                stage=ctx.stage,
                message=ctx.message,
                operations=operations,
            )
        raise InvalidInputError(
            f"handler {action!r} returned {type(step).__name__}; "
            "expected Next(...), Pause(...), Sleep(...), WaitForSignal(...) or Done(...)"
        )
    except BaseException as exc:
        # A handler's exception is data: a failed attempt, recorded (type, message, traceback)
        # and retried by policy; logged once its outcome is known (log_failure). So is its own
        # SystemExit, KeyboardInterrupt or GeneratorExit (raised into the runs' TaskGroup they
        # would end every run here, or the process), and a CancelledError of its own (an
        # awaited task was cancelled): only a cancel of this run (a cancel, a lost lease, a
        # stop past the grace) goes on as one.
        stopped_here(exc, ctx.cancelled)
        if isinstance(exc, StoppedForDrainError) and ctx.draining.is_set():
            raise  # not a failure: the step stopped early for the drain (run_instance)
        failure = failure_of(exc)
        if traced:
            # Here, where the exception still is: the span keeps it (type, message, its whole
            # traceback) as it would one that left its block. The current span is the step's,
            # not one around it: the handler's own spans have ended.
            tracing.mark_failed(failure.last_error, exc)
        # Taken here too when the handler raised, or its step was refused after they were
        # taken: an operation that completed keeps its row whatever the step's outcome.
        operations += await tools.carried()
        return FailWrite(
            instance_id=ctx.instance_id,
            attempt=ctx.attempt,
            epoch=epoch,
            error=failure.last_error,
            delay_ms=workflow.retry.delay_ms(ctx.attempt),
            final=isinstance(exc, PermanentFailure),
            type=failure.type,
            message=failure.message,
            traceback=failure.traceback,
            stage=failure.stage or ctx.stage,
            operation=failure.operation,
            progress=ctx.progress,  # the step's report, as far as it got (None: not reported)
            report=ctx.message,
            operations=operations,
        )


def log_failure(
    transition: Transition,
    error: str | None,
    *,
    action: str | None = None,
    traceback: str | None = None,
) -> None:
    """A retried attempt at WARNING, the instance's final failure at ERROR: each with the
    instance, its workflow, the attempt and the error; a handler's with its action and
    traceback too.

    Also the final failures no handler raised (a wait's timeout, an expired checkpoint, a lost
    worker: due_work.py), so that every failed instance is this one line on this one logger,
    whatever ended it, and one alert rule catches them all. What is not known there (no action
    ran, no code of the user's raised) is left out rather than logged as None.
    """
    retried = transition.status == Status.PENDING
    fields = {
        "instance_id": str(transition.instance_id),
        "workflow": transition.name,
        "action": action,
        "attempt": transition.attempts,
        "error": error,
        "traceback": traceback,
    }
    logger.log(
        logging.WARNING if retried else logging.ERROR,
        "attempt failed, retrying" if retried else "instance failed",
        extra={key: value for key, value in fields.items() if value is not None},
    )
