"""A template stage's operations, one at a time: the attempts of each (with its timeout,
retry delay and span), its record (completed, failed or skipped), the stage's count of
settled operations and the report made of it. The base of stage_run.py's _StageRun, which
decides what runs when (in sequence or in parallel, fix cycles, checkpoints); attempt() itself
is operation_attempt.py's.
"""

import asyncio
import functools
import logging
import time

from laneway.engine import tracing
from laneway.engine.context import HandlerContext, InstanceTools, NotAwaitableError, StageReport
from laneway.engine.context_budget import ContextBudget, refusal
from laneway.engine.failures import format_traceback
from laneway.engine.fix_cycles import FIX_POSITION_BASE
from laneway.engine.operation_attempt import NO_DATA, attempt, copied
from laneway.engine.payloads import json_size
from laneway.engine.record_builders import builder
from laneway.engine.stage_plan import Slot, StagePlan
from laneway.engine.template import (
    COMPLETED,
    FAILED,
    SKIPPED,
    Operation,
    OperationContext,
    OperationHandler,
    OperationResult,
    Stage,
    failed,
    slot_operation_id,
    stage_message,
    stage_progress,
)
from laneway.model import JSONValue, OperationRecord

logger = logging.getLogger("laneway.engine.stage_run")
"""The stage's logger: a failed attempt is logged as the stage run's, as it always was."""

# Made for every operation, and every attempt of it (record_builders.py).
_new_context = builder(OperationContext)
_new_record = builder(OperationRecord)


class StageOperations:
    """The operation-level half of one call of a stage's handler (see the module's doc)."""

    def __init__(self, plan: StagePlan, ctx: HandlerContext) -> None:
        self._plan = plan
        self._stage: Stage = plan.stage
        self._ctx = ctx
        self._tools: InstanceTools = ctx.require_tools()
        self._settled: dict[int, str] = {}
        self._errors: dict[int, BaseException] = {}  # a failed operation's own, by position
        self._fix_cycle = 0  # of the pass running: its rows keep it (fix_cycles.py)
        self._budget = ContextBudget(plan.cap)  # the room left in the context (context_budget.py)
        # Asked once: the stage's operations run in its context (parallel ones in copies).
        self._spans = tracing.in_traced_step()
        # In sequence the stage writes before anything waits (before the next operation, or
        # its own step), which carries what finished; in parallel the siblings run on, so an
        # outcome is also written on its own soon after (RunnerTools).
        self._carried = not plan.stage.parallel

    async def _run_operation(
        self,
        slot: Slot,
        context: dict[str, JSONValue],
        initial: dict[str, JSONValue],
    ) -> OperationRecord:
        """Attempt one operation until it completes or runs out of attempts; record it."""
        ctx = self._ctx
        position, operation, name = slot
        operation_id = slot_operation_id(ctx.instance_id, name)
        handler = self._plan.operations.get(operation.type)
        started = time.monotonic()
        attempts = 0
        error: BaseException | None = None
        encoded = NO_DATA
        done = False
        if handler is None:
            result = failed(f"no handler registered for operation type {operation.type!r}")
        while handler is not None and attempts < operation.max_attempts:
            if attempts:
                await asyncio.sleep(operation.retry_delay_ms(attempts) / 1000.0)
            attempts += 1
            operation_ctx = _new_context(
                instance_id=ctx.instance_id,
                operation_id=operation_id,
                operation_type=operation.type,
                stage=self._stage.name,
                attempt=attempts,
                max_attempts=operation.max_attempts,
                context=copied(context),
                initial_context=copied(initial),
                workflow_type=self._plan.template.type,
                cancelled=ctx.cancelled,
            )
            if self._spans:
                result, encoded, error = await self._traced_attempt(
                    handler, operation_ctx, operation
                )
            else:  # no span, not even a null context (two calls per operation)
                result, encoded, error = await attempt(
                    handler, operation_ctx, operation.timeout_seconds
                )
            done = result.status == COMPLETED
            if done and (size := self._budget.refuses(context, result.data, json_size(encoded[0]))):
                # Refused where it is made, not when the instance completes (context_budget.py).
                result, encoded, done = failed(refusal(size, self._budget.cap)), NO_DATA, False
            if done:
                break
            self._log_failed_attempt(operation, attempts, result.reason, error)
            if isinstance(error, NotAwaitableError):
                break  # a plain def: every attempt would fail the same way, after its delay
        if not done:  # the last attempt's exception (if it raised), for the stage's failure
            if error is None:
                self._errors.pop(position, None)
            else:
                self._errors[position] = error
        record = _new_record(
            operation_id=operation_id,
            instance_id=ctx.instance_id,
            stage=self._stage.name,
            position=position,
            type=operation.type,
            status=result.status,
            attempts=attempts,
            error=result.reason,
            data=result.data if done else None,
            metadata=result.metadata,
            started_at=None,
            finished_at=None,
            fix_cycle=self._fix_cycle,
        )
        # Recorded as it finishes, written with the stage's next write or on its own soon
        # after (runner_tools.RunnerTools): a crash later in the stage keeps this outcome. A
        # write on its own carries the stage's report too, which counts it (settled first).
        self._settle(position, result.status)
        await self._tools.record_operation(
            record,
            seconds=time.monotonic() - started,
            encoded=encoded,
            carried=self._carried,
            report=self._report,
        )
        return record

    def _log_failed_attempt(
        self,
        operation: Operation,
        attempt: int,
        reason: str | None,
        error: BaseException | None,
    ) -> None:
        """Every failed attempt of an operation at WARNING, with the user's traceback when it
        raised: one retried and then completed leaves its exception here (its row keeps the
        outcome only); a critical one's last is also the instance's failure (ERROR)."""
        logger.warning(
            "operation attempt failed",
            extra={
                "instance_id": str(self._ctx.instance_id),
                "stage": self._stage.name,
                "operation_type": operation.type,
                "attempt": attempt,
                "max_attempts": operation.max_attempts,
                "critical": operation.critical,
                "error": reason,
                "traceback": None if error is None else format_traceback(error),
            },
        )

    async def _traced_attempt(
        self, handler: OperationHandler, operation_ctx: OperationContext, operation: Operation
    ) -> tuple[OperationResult, tuple[str, str], BaseException | None]:
        with tracing.lazy_span(
            f"laneway.operation {operation.type}",
            functools.partial(self._span_attributes, operation, operation_ctx.attempt),
        ) as traced:
            outcome = await attempt(handler, operation_ctx, operation.timeout_seconds)
            if outcome[0].status != COMPLETED and traced is not None:  # not the step's span
                tracing.mark_failed(outcome[0].reason or outcome[0].status, outcome[2])
            return outcome

    async def _record_skipped(self, slot: Slot, reason: str) -> None:
        position, operation, name = slot
        record = _new_record(
            operation_id=slot_operation_id(self._ctx.instance_id, name),
            instance_id=self._ctx.instance_id,
            stage=self._stage.name,
            position=position,
            type=operation.type,
            status=SKIPPED,
            attempts=0,
            error=None,
            data=None,
            metadata={"reason": reason},
            started_at=None,
            finished_at=None,
            fix_cycle=self._fix_cycle,
        )
        self._settle(position, SKIPPED)
        await self._tools.record_operation(
            record, seconds=0.0, carried=self._carried, report=self._report
        )

    def _settle(self, position: int, status: str) -> None:
        # Counted for the stage's report, which is made only when it is read: by the step's
        # own write at the stage's end (runner._call_handler), or by a write of outcomes on
        # their own while the stage runs (_report). Most operations' outcomes ride with the
        # step's write, so a report made per operation would mostly be waste.
        if position < FIX_POSITION_BASE:
            self._settled[position] = status

    def _report(self) -> StageReport:
        """The stage's report as far as it got: its name, its progress counting the
        operations done (completed, or skipped, as the stage's end counts them; never the
        failed ones: a failed last stage read 100%, which reads as done) and its status
        line."""
        plan = self._plan
        done = sum(status != FAILED for status in self._settled.values())
        stages = len(plan.template.stages)
        progress = stage_progress(plan.index, stages, done, len(plan.slots))
        return self._stage.name, progress, self._message()

    def _message(self) -> str:
        statuses = list(self._settled.values())
        count = len(self._plan.slots)
        if not self._fix_cycle and statuses.count(COMPLETED) == len(statuses) == count:
            return self._plan.all_done  # the usual line, made once
        return stage_message(self._stage.name, statuses, count, self._fix_cycle)

    def _span_attributes(self, operation: Operation, attempt: int) -> dict[str, str | int]:
        return {
            "laneway.workflow": self._plan.template.type,
            "laneway.instance_id": str(self._ctx.instance_id),
            "laneway.stage": self._stage.name,
            "laneway.operation": operation.type,
            "laneway.attempt": attempt,
        }
