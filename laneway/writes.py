"""The runners' writes: what the group commit applies, fenced by owner and lease epoch.

Owns the shapes only (engine/runner.py and engine/committer.py make them, the store's
write_runner_batch applies them). Does no I/O; imports nothing from `laneway` but the model.
"""

from dataclasses import dataclass
from typing import TypeAlias
from uuid import UUID

from laneway.model import OperationRecord


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationOutcome:
    """A template operation's outcome, to be recorded with the next write of its instance.

    `seconds` is how long it ran; `finished_at` the runner's monotonic clock when it ended, so
    that the row's times are when it ran, not when the write came.
    """

    record: OperationRecord
    data_json: str
    metadata_json: str
    seconds: float
    finished_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointWrite:
    """A runner's checkpoint: the state after a handler, and the next action.

    With `pause_label` the instance also pauses there (status paused, no lease) until resumed;
    with `wait_json` (engine/waits.py) it waits instead (status waiting), or its pause carries
    an input schema and an expiry.
    """

    instance_id: UUID
    attempt: int
    epoch: int  # the lease epoch of the claim this write belongs to
    state_json: str
    next_action: str
    next_params_json: str
    progress: float | None = None
    message: str | None = None
    stage: str | None = None
    pause_label: str | None = None
    wait_json: str | None = None
    trace: str | None = None  # the step's span (W3C traceparent), for an instance with none
    operations: tuple[OperationOutcome, ...] = ()  # recorded in the same transaction


@dataclass(frozen=True, slots=True, kw_only=True)
class CompleteWrite:
    """A runner's final write: the instance completed with this result (and the stage and
    message its last step reported, when it reported one)."""

    instance_id: UUID
    attempt: int
    epoch: int  # the lease epoch of the claim this write belongs to
    result_json: str
    state_json: str
    stage: str | None = None
    message: str | None = None
    trace: str | None = None  # the step's span (W3C traceparent), for an instance with none
    operations: tuple[OperationOutcome, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class FailWrite:
    """A failed attempt: retried after `delay_ms` while attempts are left, else final.

    `final` ends the instance failed whatever attempts are left. `error` is lastError's text
    (`Type: message`); `type` to `operation` are what laneway.failures keeps of the exception.
    `progress` and `report` (its status line), where not None, replace the instance's: what
    the failing step reported (a template's stage's report where it failed), as its `stage`
    does; what it did not report stays as the last checkpoint saved it.
    """

    instance_id: UUID
    attempt: int
    epoch: int  # the lease epoch of the claim this write belongs to
    error: str
    delay_ms: float
    final: bool = False
    type: str = "Exception"
    message: str = ""
    traceback: str | None = None
    stage: str | None = None
    operation: str | None = None
    # The failed attempt's span (W3C traceparent), when traced: the first failure's is kept
    # for its retries' links, and as the instance's trace context where it has none.
    trace: str | None = None
    progress: float | None = None
    report: str | None = None
    operations: tuple[OperationOutcome, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationsWrite:
    """Operation outcomes alone, while the step that ran them goes on (a parallel stage's
    operations that finished before their siblings, a sequence's before the next starts).

    `stage`, `progress` and `message`: the running stage's report as of this write, which
    replaces the instance's unless the batch holds a step write of the instance (whose report
    wins); None keeps the instance's.
    """

    instance_id: UUID
    epoch: int
    operations: tuple[OperationOutcome, ...]
    stage: str | None = None
    progress: float | None = None
    message: str | None = None


StepWrite: TypeAlias = CheckpointWrite | CompleteWrite | FailWrite
RunnerWrite: TypeAlias = StepWrite | OperationsWrite


def ends_run(write: RunnerWrite) -> bool:
    """Whether the instance leaves `running` when this write commits (it ends, fails an
    attempt, pauses or waits), freeing its queue's slot."""
    if isinstance(write, CheckpointWrite):
        return write.pause_label is not None or write.wait_json is not None
    return not isinstance(write, OperationsWrite)
