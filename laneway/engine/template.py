"""Template definitions (declarative workflows) and their pure decisions; no I/O.

Owns the authoring API of templates (Template, Stage, Operation, Checkpoint, what an operation
handler receives and returns, the registry of operation handlers), the checks of each one's
shape at construction, and the decisions the interpreter takes from them. Checking their
wiring against a process's handlers and workflows lives in template_wiring.py; running a
template, in template_interpreter.py.
"""

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, TypeVar, overload
from uuid import UUID

from laneway.engine.backoff import retry_delay_ms
from laneway.engine.context import Next, OnExpiry, Pause
from laneway.engine.handler_map import RetryPolicy, Validator, check_name
from laneway.engine.names import check_version
from laneway.engine.payloads import encode_json
from laneway.engine.record_builders import builder
from laneway.engine.requests import check_cap, check_rate, uuid_from_int
from laneway.errors import InvalidInputError
from laneway.model import JSONValue, OperationRecord

Condition = Callable[[Mapping[str, JSONValue]], bool]
"""A predicate on the accumulated context (initial context merged with operation data)."""

MAX_ATTEMPTS_LIMIT = 100
MAX_FIX_CYCLES_LIMIT = 100

COMPLETED, FAILED, SKIPPED = "completed", "failed", "skipped"
_T = TypeVar("_T")


def _check_condition(condition: object, where: str) -> None:
    # Called only when its stage is reached: refused here, not after the stages before it ran.
    if condition is not None and not callable(condition):
        raise InvalidInputError(
            f"{where}: condition must be callable (a predicate on the context) or None, "
            f"not {condition!r}"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Operation:
    """One unit of work in a stage, run by the handler registered for its `type`.

    A failed attempt is retried inside the stage after `retry_base_ms`, doubling up to
    `retry_max_ms`. A critical operation that still fails fails its stage; a non-critical
    one is recorded as failed and the stage goes on (that outcome is final: a run of the stage
    after a lost worker, or a retry, keeps it). `condition` false: recorded as skipped.
    """

    type: str
    timeout_seconds: float = 60.0
    max_attempts: int = 3
    critical: bool = True
    condition: Condition | None = None
    retry_base_ms: float = 100.0
    retry_max_ms: float = 5_000.0

    def __post_init__(self) -> None:
        check_name(self.type, "operation type")
        _check_condition(self.condition, f"operation {self.type!r}")
        numbers: tuple[tuple[str, object, type | tuple[type, ...]], ...] = (
            ("timeout_seconds", self.timeout_seconds, (int, float)),
            ("max_attempts", self.max_attempts, int),
            ("retry_base_ms", self.retry_base_ms, (int, float)),
            ("retry_max_ms", self.retry_max_ms, (int, float)),
        )
        for field_name, value, kinds in numbers:
            if isinstance(value, bool) or not isinstance(value, kinds):
                kind = "a whole number" if kinds is int else "a number"
                raise InvalidInputError(
                    f"operation {self.type!r}: {field_name} must be {kind}, not {value!r}"
                )
        if not 0 < self.timeout_seconds <= 24 * 3600:
            raise InvalidInputError(
                f"operation {self.type!r}: timeout_seconds must be in (0, 1 day]"
            )
        if not 1 <= self.max_attempts <= MAX_ATTEMPTS_LIMIT:
            raise InvalidInputError(
                f"operation {self.type!r}: max_attempts must be between 1 and {MAX_ATTEMPTS_LIMIT}"
            )
        if not 0 <= self.retry_base_ms <= self.retry_max_ms:
            raise InvalidInputError(
                f"operation {self.type!r}: need 0 <= retry_base_ms <= retry_max_ms"
            )

    def retry_delay_ms(self, attempt: int) -> float:
        """The wait after failed attempt number `attempt` (1-based)."""
        return retry_delay_ms("exponential", self.retry_base_ms, self.retry_max_ms, attempt)


@dataclass(frozen=True, slots=True, kw_only=True)
class Stage:
    """An ordered step of a template: its operations run in sequence, or all at once.

    With `fix_operations`, a critical failure runs them (in parallel too when the stage is)
    and then all the stage's operations again (verify), up to `max_fix_cycles` times before
    the stage fails: cycles counted across lost workers and retries, which go on with the
    cycle the stage had reached. `condition` false: the stage is skipped, its operations
    recorded so.
    """

    name: str
    operations: Sequence[Operation]
    parallel: bool = False
    condition: Condition | None = None
    fix_operations: Sequence[Operation] = ()
    max_fix_cycles: int = 1

    def __post_init__(self) -> None:
        check_name(self.name, "stage name")
        # Accept any sequence from authors, keep an immutable one.
        object.__setattr__(self, "operations", tuple(self.operations))
        object.__setattr__(self, "fix_operations", tuple(self.fix_operations))
        if not self.operations:
            raise InvalidInputError(f"stage {self.name!r} has no operations")
        for operation in (*self.operations, *self.fix_operations):
            if not isinstance(operation, Operation):
                raise InvalidInputError(
                    f"stage {self.name!r} holds {operation!r}, not an Operation"
                )
        _check_condition(self.condition, f"stage {self.name!r}")
        cycles = self.max_fix_cycles
        if isinstance(cycles, bool) or not isinstance(cycles, int):
            raise InvalidInputError(
                f"stage {self.name!r}: max_fix_cycles must be a whole number, not {cycles!r}"
            )
        if not 0 <= cycles <= MAX_FIX_CYCLES_LIMIT:
            raise InvalidInputError(
                f"stage {self.name!r}: max_fix_cycles must be between 0 and {MAX_FIX_CYCLES_LIMIT}"
            )
        # A contradiction is refused; the default (1) and 0 without fix operations are not one.
        if self.fix_operations and cycles == 0:
            raise InvalidInputError(
                f"stage {self.name!r}: fix_operations never run with max_fix_cycles=0"
            )
        if not self.fix_operations and cycles > 1:
            raise InvalidInputError(
                f"stage {self.name!r}: max_fix_cycles={cycles} has no effect without fix_operations"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoint:
    """Pause with `label` after stage `after_stage` when `condition` (default: always) holds,
    whether that stage ran or its own condition skipped it.

    With an `input_schema` (JSON Schema), a resume must bring an input that matches it; the
    input is merged into the context under the label. With `timeout_seconds`, the checkpoint
    expires after that long and `on_expiry` happens (by default the instance fails).
    """

    after_stage: str
    label: str
    condition: Condition | None = None
    input_schema: JSONValue = None
    timeout_seconds: float | None = None
    on_expiry: OnExpiry | None = None

    def __post_init__(self) -> None:
        check_name(self.label, "checkpoint label")
        _check_condition(self.condition, f"checkpoint {self.label!r}")
        self.pause(self.after_stage)  # the same checks as a handler's Pause

    def pause(self, following: str) -> Pause:
        """The pause of this checkpoint, going on with stage `following` once resumed."""
        return Pause(
            self.label,
            following,
            input_schema=self.input_schema,
            timeout_seconds=self.timeout_seconds,
            on_expiry=self.on_expiry,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueSettings:
    """Caps a template asks for its queue; applying them is the engine's start-up job."""

    concurrency: int
    rate_per_minute: float | None = None

    def __post_init__(self) -> None:
        check_cap(self.concurrency, "queue concurrency")
        check_rate(self.rate_per_minute, "queue rate_per_minute")


@dataclass(frozen=True, slots=True, kw_only=True)
class Template:
    """A declarative workflow: ordered stages of operations over an accumulated context.

    `type` is its workflow name. The initial context is the instance's params (a JSON object).
    On completion, `next_workflow` is enqueued with the final context (overlaid with
    `next_params`) as its params. `retry` is the instance-level policy: see template_interpreter.py.
    """

    type: str
    stages: Sequence[Stage]
    queue: str | None = None
    version: int | str = 1  # its workflow's version (laneway.Workflow's `version`), as text
    description: str = ""
    estimated_seconds: float | None = None
    checkpoints: Sequence[Checkpoint] = ()
    next_workflow: str | None = None
    next_params: Mapping[str, JSONValue] | None = None
    queue_settings: QueueSettings | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    validator: Validator | None = None

    def __post_init__(self) -> None:
        check_name(self.type, "template type")
        if self.queue is not None:
            check_name(self.queue, "queue name")
        object.__setattr__(self, "stages", tuple(self.stages))
        object.__setattr__(self, "checkpoints", tuple(self.checkpoints))
        if not self.stages:
            raise InvalidInputError(f"template {self.type!r} has no stages")
        if not all(isinstance(stage, Stage) for stage in self.stages):
            raise InvalidInputError(f"template {self.type!r}: every stage must be a Stage")
        if not all(isinstance(checkpoint, Checkpoint) for checkpoint in self.checkpoints):
            raise InvalidInputError(
                f"template {self.type!r}: every checkpoint must be a Checkpoint"
            )
        # Each its own: a resume names its checkpoint by label, and its input lands in the
        # context under it.
        for what, names in (
            ("stage names", [stage.name for stage in self.stages]),
            ("checkpoint labels", [checkpoint.label for checkpoint in self.checkpoints]),
        ):
            duplicates = sorted({name for name in names if names.count(name) > 1})
            if duplicates:
                raise InvalidInputError(f"template {self.type!r} repeats {what} {duplicates}")
        object.__setattr__(
            self, "version", check_version(self.version, f"template {self.type!r}: version")
        )
        if self.estimated_seconds is not None and not self.estimated_seconds > 0:
            raise InvalidInputError(f"template {self.type!r}: estimated_seconds must be positive")
        if self.next_workflow is not None:
            check_name(self.next_workflow, "next workflow")
        if self.next_params is not None:
            # Checked now, not when the instance completes and enqueues its next workflow.
            if not isinstance(self.next_params, Mapping):
                raise InvalidInputError(
                    f"template {self.type!r}: next_params must be a JSON object (a mapping), "
                    f"not {self.next_params!r}"
                )
            encode_json(dict(self.next_params), what=f"template {self.type!r}: next_params")

    @property
    def stage_names(self) -> list[str]:
        return [stage.name for stage in self.stages]


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationContext:
    """What an operation handler receives.

    `operation_id` is stable for a slot of an instance across crashes, retries and fix
    cycles, so a handler can use it as an idempotency key for its side effects. `context`
    is a private copy of the accumulated context: changing it changes nothing.
    """

    instance_id: UUID
    operation_id: UUID
    operation_type: str
    stage: str
    attempt: int
    max_attempts: int
    context: dict[str, JSONValue]
    initial_context: dict[str, JSONValue]
    workflow_type: str
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationResult:
    """An operation's outcome; build it with `completed(...)` or `failed(...)`."""

    status: Literal["completed", "failed"]
    data: dict[str, JSONValue] = field(default_factory=dict)
    reason: str | None = None
    metadata: JSONValue = None

    def __post_init__(self) -> None:
        if self.status not in ("completed", "failed"):
            raise ValueError(
                f"operation status must be 'completed' or 'failed', not {self.status!r}"
            )
        if not isinstance(self.data, dict):
            raise TypeError("operation data must be a dict (a JSON object)")

    @property
    def is_completed(self) -> bool:
        return self.status == "completed"


def completed(
    data: Mapping[str, JSONValue] | None = None, *, metadata: JSONValue = None
) -> OperationResult:
    """A completed operation; `data` is merged into the context of later operations."""
    if data is not None and not isinstance(data, Mapping):
        raise TypeError("operation data must be a mapping (a JSON object)")
    return _new_result(status="completed", data=dict(data) if data else {}, metadata=metadata)


def failed(reason: str, metadata: JSONValue = None) -> OperationResult:
    """A failed operation, with a reason that becomes the row's (and maybe the instance's) error."""
    return _new_result(status="failed", reason=str(reason), metadata=metadata)


# Every operation returns one (record_builders.py); both above build only what its checks pass.
_new_result = builder(OperationResult, checked=False)


OperationHandler = Callable[[OperationContext], Awaitable[OperationResult]]


class OperationRegistry(Mapping[str, OperationHandler]):
    """Operation handlers by operation type; a type is registered once."""

    def __init__(self, handlers: Mapping[str, OperationHandler] | None = None) -> None:
        self._handlers: dict[str, OperationHandler] = {}
        for operation_type, handler in (handlers or {}).items():
            self.register(operation_type, handler)

    def register(self, operation_type: str, handler: OperationHandler) -> None:
        """Add a handler; re-registering the same one is a no-op.

        Raises:
            InvalidInputError: a bad type name, a handler that is not callable, or another
                handler already registered for this type.
        """
        check_name(operation_type, "operation type")
        if not callable(handler):
            raise InvalidInputError(f"handler for operation {operation_type!r} is not callable")
        existing = self._handlers.get(operation_type)
        if existing is not None and existing is not handler:
            raise InvalidInputError(f"another handler is registered for {operation_type!r}")
        self._handlers[operation_type] = handler

    def __getitem__(self, operation_type: str) -> OperationHandler:
        return self._handlers[operation_type]

    @overload
    def get(self, operation_type: str, /) -> OperationHandler | None: ...

    @overload
    def get(
        self, operation_type: str, /, default: OperationHandler | _T
    ) -> OperationHandler | _T: ...

    def get(self, operation_type: str, /, default: object = None) -> object:
        # One lookup per operation run, not Mapping's __getitem__ inside a try.
        return self._handlers.get(operation_type, default)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._handlers))

    def __len__(self) -> int:
        return len(self._handlers)


# -- decisions (pure) ---------------------------------------------------------------------------


def merge_context(
    context: Mapping[str, JSONValue], records: Iterable[OperationRecord]
) -> dict[str, JSONValue]:
    """`context` with the data of each completed record merged in, later keys winning."""
    merged = dict(context)
    for record in records:
        if record.status == COMPLETED and isinstance(record.data, dict):
            merged.update(record.data)
    return merged


def step_after_stage(
    template: Template, index: int, context: Mapping[str, JSONValue]
) -> Next | Pause:
    """What follows stage `index`: the next stage, or a pause at the first checkpoint whose
    condition holds, whether the stage ran or its condition skipped it (a review gate is
    never passed silently; a checkpoint that should not pause then says so in its own
    condition). After the last stage the next action is that stage again, which then
    finishes the instance (so its report is checkpointed).
    """
    stages = template.stages
    following = stages[index + 1].name if index + 1 < len(stages) else stages[index].name
    view: Mapping[str, JSONValue] | None = None  # made once, when a condition asks
    for checkpoint in template.checkpoints:
        if checkpoint.after_stage != stages[index].name:
            continue
        if checkpoint.condition is None:
            return checkpoint.pause(following)
        if view is None:
            view = MappingProxyType(dict(context))
        if checkpoint.condition(view):
            return checkpoint.pause(following)
    return Next(following)


def child_params(template: Template, context: Mapping[str, JSONValue]) -> dict[str, JSONValue]:
    """The params of the `next_workflow` instance: the final context, then `next_params`."""
    return {**context, **(template.next_params or {})}


def stage_progress(index: int, stage_count: int, done: int, operation_count: int) -> float:
    """Finished stages over stages, plus the share of the operations of this one done."""
    share = min(done, operation_count) / operation_count if operation_count else 1.0
    return min(1.0, (index + share) / stage_count)


def stage_message(
    stage: str, statuses: Iterable[str], operation_count: int, fix_cycle: int = 0
) -> str:
    """A status line such as `analyze: 2 of 3 operations done (1 failed)`."""
    counted = list(statuses)
    done = counted.count(COMPLETED)
    text = f"{stage}: {done} of {operation_count} operations done"
    if done == len(counted) and not fix_cycle:
        return text  # nothing failed or skipped
    notes = [f"{counted.count(s)} {s}" for s in (FAILED, SKIPPED) if counted.count(s)]
    if fix_cycle:
        notes.append(f"fix cycle {fix_cycle}")
    return f"{text} ({', '.join(notes)})" if notes else text


def operation_id_for(instance_id: UUID, stage: str, position: int) -> UUID:
    """The id of an operation slot: the same across crashes, retries and fix cycles.

    uuid.uuid5(instance_id, f"{stage}/{position}"), built from its SHA-1."""
    return slot_operation_id(instance_id, operation_slot(stage, position))


def operation_slot(stage: str, position: int) -> bytes:
    """The name of an operation slot, as its id is made from it (a stage's plan keeps them)."""
    return f"{stage}/{position}".encode()


def slot_operation_id(instance_id: UUID, slot: bytes) -> UUID:
    """operation_id_for of the slot named `slot` (operation_slot)."""
    digest = hashlib.sha1(instance_id.int.to_bytes(16) + slot).digest()  # .bytes, no frame
    return uuid_from_int(int.from_bytes(digest[:16]) & _UUID5_CLEAR | _UUID5_SET)


# The version (5) and variant (RFC 4122) bits of a name-based id, as uuid.UUID(version=5) sets them.
_UUID5_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_UUID5_SET = (5 << 76) | (0x8000 << 48)
