"""Running a template's stage: the handler each stage compiles to.

Owns one call of a stage's handler: its operations in sequence or in parallel, each with its
condition, the fix-verify cycles of a failed critical operation, one operation row per outcome
(so a re-run skips what completed), and the checkpoint, progress and message the stage
reports. One operation's attempts, timeout and record: stage_operations.py. Where a
fix-verify loop stands after a lost worker: fix_cycles.py; what a checkpoint's pause keeps in
the state: stage_pauses.py; what a stage's runs share, worked out once: stage_plan.py.
Compiling a template into a workflow: template_interpreter.py.
"""

import asyncio
import dataclasses
from collections.abc import Coroutine, Mapping, Sequence
from types import MappingProxyType

from laneway.engine import time_limit
from laneway.engine.context import (
    Done,
    HandlerContext,
    Next,
    Pause,
    PermanentFailure,
    Step,
    StoppedForDrainError,
)
from laneway.engine.context_budget import input_room
from laneway.engine.failures import StageFailure
from laneway.engine.fix_cycles import failure_text, may_fix, resume_point
from laneway.engine.handler_map import Handler
from laneway.engine.stage_operations import StageOperations
from laneway.engine.stage_pauses import mark_paused, take_pause
from laneway.engine.stage_plan import Slot, plan_stage
from laneway.engine.template import (
    COMPLETED,
    FAILED,
    Operation,
    OperationHandler,
    Template,
    child_params,
    merge_context,
    step_after_stage,
)
from laneway.model import JSONValue, OperationRecord


class StageFailedError(PermanentFailure, StageFailure):
    """A critical operation of a stage failed after its attempts and any fix cycles.

    Final: operations retry themselves, so the instance fails at once; a lost worker is
    still an ordinary attempt under the template's RetryPolicy. Carries the stage and the
    operation's type (StageFailure), which the instance's `failures` show.
    """


def stage_handler(
    template: Template, index: int, operations: Mapping[str, OperationHandler]
) -> Handler:
    plan = plan_stage(template, index, operations)

    # Returns the stage's run as it is (a coroutine), rather than awaiting it in one more.
    def run_stage(ctx: HandlerContext, params: JSONValue) -> Coroutine[object, None, Step]:
        return _StageRun(plan, ctx).run(params)

    return run_stage


_Pass = tuple[dict[str, JSONValue], OperationRecord | None]
"""The outcome of running a list of operations once: the context after it, and the critical
operation's failure that stopped it, if one did."""


class _StageRun(StageOperations):
    """One call of a stage's handler: runs the stage, or finishes the instance after it."""

    async def run(self, params: JSONValue) -> Step:
        plan = self._plan
        state = self._ctx.state
        if "initial_context" in state:
            initial = dict(state["initial_context"])
            context = dict(state["context"])
            paused_at, retried = take_pause(
                state, params, index=plan.index, stage_count=len(plan.template.stages)
            )
            if retried:
                # retryWorkflow after the checkpoint expired: the stage is done; ask again.
                return await self._after_stage(context)
            if paused_at is not None and params is not None:
                # Resumed with a reviewer's input: it joins the context under the label.
                context[str(paused_at)] = params
                resumed = f"with the input resumed at checkpoint {paused_at!r}"
                self._budget.check(context, resumed, self._stage.name)
        else:  # the first stage of a new instance: its params are the initial context
            initial = dict(params) if isinstance(params, dict) else {}
            context = dict(initial)
        if int(state.get("stages_done") or 0) > plan.index:
            return await self._finish(context)
        stage = self._stage
        # The stage's progress and status line are reported when it ends (a checkpoint saves
        # them), when it fails (its failure does), and while it runs, by each write of its
        # operations' outcomes on their own (_report); from here on, a failure is this stage's.
        # Set as report() would: a stage's name is a checked name, its status line is made of
        # it and numbers, so both are storable and short.
        self._ctx.stage = stage.name
        try:
            if stage.condition is not None and not stage.condition(MappingProxyType(context)):
                for slot in plan.slots:
                    await self._record_skipped(slot, "stage condition is false")
                ran = False
            else:
                rows = {
                    row.position: row
                    for row in await self._tools.finished_operations()
                    if row.stage == stage.name
                }
                context = await self._run_with_fixes(context, initial, rows)
                ran = True
        except Exception:
            # The failed attempt's write carries this report (runner._call_handler), or the
            # instance would go on showing the stage before's: how many of the stage's
            # operations settled, and how, as the stage's own report words it (_report).
            _, self._ctx.progress, self._ctx.message = self._report()
            raise
        state["initial_context"] = initial
        state["context"] = context
        state["stages_done"] = plan.index + 1
        self._ctx.progress = plan.progress
        self._ctx.message = (
            self._message() if ran else f"{stage.name}: skipped (condition is false)"
        )
        if plan.following is not None and not plan.last:
            return plan.following  # the next stage, and no checkpoint to ask (the usual)
        return await self._after_stage(context)

    async def _after_stage(self, context: dict[str, JSONValue]) -> Step:
        plan = self._plan
        step = plan.following or step_after_stage(plan.template, plan.index, context)
        if plan.last and isinstance(step, Next):
            # The last stage, with no pause after it: the instance finishes in this step, and
            # the completion keeps the stage's report (no step of its own to checkpoint it).
            return await self._finish(context)
        if isinstance(step, Pause):
            mark_paused(self._ctx.state, step.label)
            # A resume's input joins the context: one that would take it past its cap is
            # refused at the resume, and the instance stays paused (engine.resume).
            room = input_room(context, step.label, self._budget.cap)
            return dataclasses.replace(step, max_input_bytes=room)
        return step

    async def _finish(self, context: dict[str, JSONValue]) -> Done:
        self._budget.check(context, "at the template's end", self._stage.name)
        result: dict[str, JSONValue] = {"context": context}
        template = self._plan.template
        if template.next_workflow is not None:
            # Idempotent per parent: a finish re-run after a crash finds the same child.
            child_id = await self._tools.enqueue_child(
                template.next_workflow, child_params(template, context)
            )
            result["next_instance_id"] = str(child_id)
        return Done(result)

    async def _run_with_fixes(
        self,
        context: dict[str, JSONValue],
        initial: dict[str, JSONValue],
        rows: Mapping[int, OperationRecord],
    ) -> dict[str, JSONValue]:
        stage = self._stage
        fix_rows: Mapping[int, OperationRecord] = rows
        stage_rows: Mapping[int, OperationRecord] = rows  # none (the usual): nothing to resume
        if rows:
            # A run after a lost worker or a retry goes on with the fix cycle the rows had
            # reached, reusing only that cycle's rows (fix_cycles.py).
            point = resume_point(rows.values(), context)
            if point.context is not context:
                self._budget.forget()  # the data of the passes before joined it uncounted
            self._fix_cycle = point.cycle
            context, fix_rows, stage_rows = point.context, point.fix_rows, point.stage_rows
        while True:
            if self._fix_cycle:  # a fix cycle: its fix operations, then verify
                context, failure = await self._run_pass(
                    self._plan.fix_slots, context, initial, fix_rows
                )
                if failure is not None:
                    raise StageFailedError(
                        failure_text(stage, failure, "fix operation", self._fix_cycle),
                        stage=stage.name,
                        operation=failure.type,
                    ) from self._errors.get(failure.position)
            # Every operation of the stage, since a fix may change any result.
            self._settled.clear()
            context, failure = await self._run_pass(self._plan.slots, context, initial, stage_rows)
            if failure is None:
                return context
            if not may_fix(stage, self._fix_cycle):
                raise StageFailedError(
                    failure_text(stage, failure, "operation", self._fix_cycle),
                    stage=stage.name,
                    operation=failure.type,
                ) from self._errors.get(failure.position)
            self._fix_cycle += 1
            fix_rows, stage_rows = {}, {}

    def _run_pass(
        self,
        slots: Sequence[Slot],
        context: dict[str, JSONValue],
        initial: dict[str, JSONValue],
        rows: Mapping[int, OperationRecord],
    ) -> Coroutine[object, None, _Pass]:
        """Run the operations of `slots` once, reusing the final outcomes among `rows`
        (_reusable). (The run itself is the coroutine returned: a pass costs no frame of its
        own.)"""
        if self._stage.parallel:
            return self._run_parallel(slots, context, initial, rows)
        return self._run_sequence(slots, context, initial, rows)

    async def _run_sequence(
        self,
        slots: Sequence[Slot],
        context: dict[str, JSONValue],
        initial: dict[str, JSONValue],
        rows: Mapping[int, OperationRecord],
    ) -> _Pass:
        # In sequence, each operation sees the data of those before it, and a critical
        # failure stops the ones after it. A fix cycle's operations run here too.
        for slot in slots:
            position, operation, _ = slot
            record = self._reusable(position, operation, rows) if rows else None
            if record is None:
                self._ctx.raise_if_cancelled()
                # What finished before is recorded before this starts: a crash in this one
                # never runs those again.
                await self._tools.write_operations()
                if self._ctx.draining.is_set() and await self._resumable_here():
                    # The process stops: rather than start an operation that the grace's end
                    # may cut off (and another process run again in full), the step stops
                    # here and its instance is handed back at once (runner.py); the next run
                    # of the stage skips what is written.
                    raise StoppedForDrainError(f"stage {self._stage.name!r}: the process drains")
                record = await self._run_unless_skipped(slot, context, initial)
            if record is None:
                continue
            if record.data:  # completed with data to merge (else the context stays as it is)
                context = merge_context(context, (record,))
            if record.status == FAILED and operation.critical:
                return context, record
        return context, None

    async def _resumable_here(self) -> bool:
        """Whether a run of the stage resumed from its rows would go on from here (asked only
        while the process drains). Not before the first operation of a fix cycle begun in
        this run: no row of it is written yet, so the resumed run would go back to the pass
        before (fix_cycles.resume_point) and run its failed operation again."""
        if not self._fix_cycle:
            return True
        name, cycle = self._stage.name, self._fix_cycle
        rows = await self._tools.finished_operations()
        return any(row.stage == name and row.fix_cycle == cycle for row in rows)

    async def _run_parallel(
        self,
        slots: Sequence[Slot],
        context: dict[str, JSONValue],
        initial: dict[str, JSONValue],
        rows: Mapping[int, OperationRecord],
    ) -> _Pass:
        # At once, every operation sees the context as the stage found it, and all of them
        # finish (more completed rows for a retry). Data merges in position order, so the
        # result does not depend on who finished first.
        records: dict[int, OperationRecord] = {}
        await self._tools.write_operations()  # an earlier pass's, before these start
        self._budget.start_pass(parallel=True)
        # Each starts here, in this task, until one waits: that one goes on in this task (what
        # it bound to the task stays right), the rest get tasks (_run_rest). Most operations
        # never wait, and then no task, nor a group for them, is made.
        for number, slot in enumerate(slots):
            position, operation, _ = slot
            reused = self._reusable(position, operation, rows) if rows else None
            if reused is not None:
                records[position] = reused
                continue
            begun = time_limit.start_here(self._run_unless_skipped(slot, context, initial))
            if not begun.done:
                await self._run_rest(
                    (position, begun), slots[number + 1 :], context, initial, rows, records
                )
                break
            if begun.value is not None:
                records[position] = begun.value
        self._budget.end_pass()
        ordered = [records[position] for position in sorted(records)]
        critical = {position for position, operation, _ in slots if operation.critical}
        failure = next((r for r in ordered if r.status == FAILED and r.position in critical), None)
        return merge_context(context, ordered), failure

    async def _run_rest(
        self,
        waiting: tuple[int, time_limit.Begun[OperationRecord | None]],
        slots: Sequence[Slot],
        context: dict[str, JSONValue],
        initial: dict[str, JSONValue],
        rows: Mapping[int, OperationRecord],
        records: dict[int, OperationRecord],
    ) -> None:
        """Of a parallel pass: the operation that waits (`waiting`, begun) goes on here, the
        ones after it (`slots`) run in tasks; their records join `records`."""
        tasks: dict[int, asyncio.Task[OperationRecord | None]] = {}
        try:
            async with asyncio.TaskGroup() as group:
                for slot in slots:
                    position, operation, _ = slot
                    reused = self._reusable(position, operation, rows) if rows else None
                    if reused is not None:
                        records[position] = reused
                        continue
                    run = self._run_unless_skipped(slot, context, initial)
                    tasks[position] = group.create_task(run)
                record = await waiting[1]
                if record is not None:
                    records[waiting[0]] = record
        except ExceptionGroup as errors:
            # A lost lease (or a bug) in one operation stops its siblings; surface the cause.
            raise errors.exceptions[0] from None
        for position, task in tasks.items():
            record = task.result()
            if record is not None:
                records[position] = record

    def _reusable(
        self, position: int, operation: Operation, rows: Mapping[int, OperationRecord]
    ) -> OperationRecord | None:
        """The row of this slot from an earlier run of the stage, if its outcome is final: it
        completed, or (non-critical) it failed after its attempts and the stage went on. A
        critical failure is not: it failed the stage, and a retry runs it again."""
        row = rows.get(position)
        if row is None or row.type != operation.type:
            return None
        if row.status != COMPLETED and (row.status != FAILED or operation.critical):
            return None
        if isinstance(row.data, dict) and row.data:
            self._budget.reused(row.data)
        self._settle(position, row.status)
        return row

    def _run_unless_skipped(
        self,
        slot: Slot,
        context: dict[str, JSONValue],
        initial: dict[str, JSONValue],
    ) -> Coroutine[object, None, OperationRecord | None]:
        """The operation's run, or its record as skipped (which returns None)."""
        condition = slot[1].condition
        if condition is not None and not condition(MappingProxyType(context)):
            return self._record_skipped(slot, "operation condition is false")
        return self._run_operation(slot, context, initial)
