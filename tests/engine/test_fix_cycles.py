"""Where a stage's fix-verify loop stands, read from its rows (fix_cycles.py): pure, no I/O.
Runs that lose their worker mid-cycle are tested on PostgreSQL in test_template_recovery.py."""

from uuid import UUID

import pytest

from laneway.engine.fix_cycles import FIX_POSITION_BASE, may_fix, resume_point
from laneway.engine.template import Operation, Stage, operation_id_for
from laneway.model import JSONValue, OperationRecord

_ID = UUID(int=7)
FIX = FIX_POSITION_BASE


def _row(
    position: int, cycle: int, status: str = "completed", **data: JSONValue
) -> OperationRecord:
    return OperationRecord(
        operation_id=operation_id_for(_ID, "s", position),
        instance_id=_ID,
        stage="s",
        position=position,
        type="fix" if position >= FIX else "check",
        status=status,
        attempts=1,
        error=None if status == "completed" else "broken",
        data=dict(data) if status == "completed" else None,
        metadata=None,
        started_at=None,
        finished_at=None,
        fix_cycle=cycle,
    )


def test_a_stage_with_no_rows_starts_its_first_pass_with_its_context() -> None:
    context: dict[str, JSONValue] = {"ticket": 1}
    point = resume_point([], context)
    assert (point.cycle, point.fix_rows, point.stage_rows) == (0, {}, {})
    assert point.context is context  # nothing to merge: no copy


def test_rows_of_the_first_pass_are_reused_in_it() -> None:
    rows = [_row(0, 0, a=1), _row(1, 0, "failed")]
    point = resume_point(rows, {"ticket": 1})
    assert point.cycle == 0
    assert point.stage_rows == {0: rows[0], 1: rows[1]}
    assert point.context == {"ticket": 1}  # the pass merges its reused rows itself


def test_a_cycle_resumes_with_its_own_rows_and_the_data_of_the_passes_before_it() -> None:
    # Cycle 2's fix completed, its verify had done #0 when the worker was lost; #1's row is
    # still cycle 1's (stale), as is what the first pass and cycle 1 left in the context.
    rows = [
        _row(0, 2, a="verified in 2"),
        _row(1, 1, "failed"),
        _row(FIX, 2, fix="fixed in 2"),
        _row(FIX + 1, 1, fix="fixed in 1", first="cycle 1 only"),
    ]
    point = resume_point(rows, {"ticket": 1})
    assert point.cycle == 2
    assert point.fix_rows == {FIX: rows[2]}
    assert point.stage_rows == {0: rows[0]}
    assert point.context == {"ticket": 1, "fix": "fixed in 1", "first": "cycle 1 only"}


def test_earlier_passes_merge_in_the_order_they_ran() -> None:
    # Cycle 1's fix ran before cycle 1's verify, which ran before cycle 2's fix: later wins.
    rows = [
        _row(0, 1, key="verify 1"),
        _row(FIX, 1, key="fix 1"),
        _row(FIX + 1, 2, other="fix 2"),
    ]
    assert resume_point(rows, {}).context == {"key": "verify 1"}


@pytest.mark.parametrize(
    ("fixes", "max_fix_cycles", "cycle", "allowed"),
    [
        (True, 2, 0, True),
        (True, 2, 1, True),
        (True, 2, 2, False),
        (True, 2, 3, False),  # a stage that lowered its cap in a new version
        (False, 1, 0, False),  # a Stage refuses fixes with 0 cycles, or cycles > 1 with none
        (False, 0, 0, False),
    ],
)
def test_may_fix_until_the_cycles_run_out(
    fixes: bool, max_fix_cycles: int, cycle: int, allowed: bool
) -> None:
    stage = Stage(
        name="s",
        operations=[Operation(type="check")],
        fix_operations=[Operation(type="fix")] if fixes else [],
        max_fix_cycles=max_fix_cycles,
    )
    assert may_fix(stage, cycle) is allowed
