"""Where a stage's fix-verify loop stands, read back from its operation rows (pure, no I/O).

Owns the fix-cycle numbering of a stage's rows, the decisions taken from it, and the text of a
stage's failure. Each row keeps the cycle of the pass that wrote it (0: the stage's first pass;
n: the fix operations of cycle n, and the verify pass after them), so a run of the stage after
a lost worker or a retry goes on with the cycle it had reached, never counts its cycles from
zero again, and reuses only the rows of that cycle. Running the passes is stage_run.py's.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from laneway.engine.template import Stage, merge_context
from laneway.model import JSONValue, OperationRecord

FIX_POSITION_BASE = 1000
"""Rows of fix operations sit at positions 1000 + i, apart from the stage's own 0 + i."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ResumePoint:
    """How a stage's run takes up its fix-verify loop from the rows an earlier run left.

    `cycle` is the fix cycle it had reached (0: still its first pass). From cycle n > 0 the run
    does cycle n's fix operations, then verifies, with `context` (the stage's context with the
    data of every pass before cycle n); `fix_rows` and `stage_rows` are the rows cycle n's fix
    pass and verify pass (or the first pass's) wrote already, by position, for reuse.
    """

    cycle: int
    context: dict[str, JSONValue]
    fix_rows: Mapping[int, OperationRecord]
    stage_rows: Mapping[int, OperationRecord]


def resume_point(rows: Iterable[OperationRecord], context: dict[str, JSONValue]) -> ResumePoint:
    """Where a stage whose run starts with `context` (the context before it) and finds `rows`
    (this stage's rows, any pass) takes up its loop.

    A pass's rows are written before the next pass starts (a fix pass's before its verify
    pass), so the highest cycle among the rows is the one that was running. The data of the
    passes before it is merged in the order they ran (each cycle's fix operations before its
    verify pass, positions in order): what the stage's context held when that cycle began,
    less what the later passes overwrote in their rows.
    """
    listed = list(rows)
    cycle = max((row.fix_cycle for row in listed), default=0)
    current = [row for row in listed if row.fix_cycle == cycle]
    earlier = sorted(
        (row for row in listed if row.fix_cycle < cycle),
        key=lambda row: (row.fix_cycle, row.position < FIX_POSITION_BASE, row.position),
    )
    return ResumePoint(
        cycle=cycle,
        context=merge_context(context, earlier) if earlier else context,
        fix_rows={row.position: row for row in current if row.position >= FIX_POSITION_BASE},
        stage_rows={row.position: row for row in current if row.position < FIX_POSITION_BASE},
    )


def may_fix(stage: Stage, cycle: int) -> bool:
    """Whether a stage whose pass of cycle `cycle` failed may run another fix cycle.

    max_fix_cycles caps a stage's cycles across lost workers and retries alike: a retry of its
    instance runs the failed operations again within the cycles that are left."""
    return bool(stage.fix_operations) and cycle < stage.max_fix_cycles


def failure_text(stage: Stage, record: OperationRecord, what: str, cycle: int) -> str:
    """The message of a stage's failure: its operation `record` failed in the pass of `cycle`."""
    text = (
        f"stage {stage.name!r}: {what} {record.type!r} (#{record.position}) failed "
        f"after {record.attempts} attempt(s)"
    )
    if cycle:
        text += f" and {cycle} fix cycle(s)"
    return f"{text}: {record.error}"
