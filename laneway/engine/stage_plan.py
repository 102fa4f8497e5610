"""What running one stage of a template needs that no instance changes, worked out once.

Owns the StagePlan a stage's handler is compiled with (template_interpreter.py): the stage's
slots (position, operation, and the name its operation id is made from), its progress, its
usual status line, and the step after it when no checkpoint can follow it; derived here once,
not on every run of the stage (each instance runs each stage). Running the stage: stage_run.py.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from laneway.engine.context import Next
from laneway.engine.context_budget import context_cap
from laneway.engine.fix_cycles import FIX_POSITION_BASE
from laneway.engine.template import (
    COMPLETED,
    Operation,
    OperationHandler,
    Stage,
    Template,
    operation_slot,
    stage_message,
)

Slot = tuple[int, Operation, bytes]
"""An operation's place in a pass: its position, the operation, and its slot's name (what its
operation id is made from: template.operation_slot)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StagePlan:
    """Stage `index` of `template`, as each run of it reads it (see the module's doc)."""

    template: Template
    index: int
    stage: Stage
    operations: Mapping[str, OperationHandler]
    cap: int  # of the template's context (context_budget.py)
    last: bool  # the template's last stage
    progress: float  # reported once the stage ran (or its condition skipped it)
    slots: tuple[Slot, ...]  # the stage's operations, at positions 0 + i
    fix_slots: tuple[Slot, ...]  # its fix operations, at FIX_POSITION_BASE + i
    following: Next | None  # the step after the stage; None: a checkpoint may pause there
    all_done: str  # its status line once every operation completed, with no fix cycle


def plan_stage(
    template: Template, index: int, operations: Mapping[str, OperationHandler]
) -> StagePlan:
    """The plan of stage `index` of `template`, finding operation handlers in `operations`."""
    stages = template.stages
    stage = stages[index]
    following = stages[index + 1].name if index + 1 < len(stages) else stage.name
    slots = _slots(stage.name, 0, stage.operations)
    paused_after = any(checkpoint.after_stage == stage.name for checkpoint in template.checkpoints)
    return StagePlan(
        template=template,
        index=index,
        stage=stage,
        operations=operations,
        cap=context_cap(template),
        last=index == len(stages) - 1,
        progress=(index + 1) / len(stages),
        slots=slots,
        fix_slots=_slots(stage.name, FIX_POSITION_BASE, stage.fix_operations),
        following=None if paused_after else Next(following),
        all_done=stage_message(stage.name, [COMPLETED] * len(slots), len(slots)),
    )


def _slots(stage: str, base: int, operations: Sequence[Operation]) -> tuple[Slot, ...]:
    return tuple(
        (base + offset, operation, operation_slot(stage, base + offset))
        for offset, operation in enumerate(operations)
    )
