"""HandlerContext: what a workflow handler receives, and the steps it returns.

Owns the handler-facing surface: identity, attempt, the mutable state, cancellation and
progress reporting. Does no I/O; the runner reads what the handler left here.
"""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol
from uuid import UUID

from laneway.engine.names import check_name
from laneway.engine.payloads import storable_text
from laneway.engine.waits import (
    ExpiryAction,
    check_expiry,
    check_input_schema,
    check_max_input_bytes,
    check_wait_seconds,
    checkpoint_wait,
    signal_wait,
    sleep_wait,
)
from laneway.errors import InvalidInputError
from laneway.model import JSONValue, LockRecord, OperationRecord

MAX_REPORT_MESSAGE_CHARS = 500  # a report()'s status line is cut here (shown in every list)

StageReport = tuple[str, float, str]
"""A template stage's report while it runs: its name, progress (0..1) and status line."""


@dataclass(frozen=True, slots=True)
class Next:
    """Go on with `action` (a handler name of the same workflow), passing it `params`."""

    action: str
    params: JSONValue = None


@dataclass(frozen=True, slots=True)
class Done:
    """End the instance as completed, optionally with a JSON result."""

    result: JSONValue = None


@dataclass(frozen=True, slots=True)
class OnExpiry:
    """What a review checkpoint's expiry does: `"resume"` with `input` (which must match the
    checkpoint's input schema), `"cancel"` or `"fail"` the instance."""

    then: ExpiryAction
    input: JSONValue = None


@dataclass(frozen=True, slots=True)
class Pause:
    """Checkpoint, then pause with the checkpoint `label` until the instance is resumed;
    on resume, `action` runs with `params`, or with the resume's input when one is given.

    With an `input_schema` (JSON Schema), a resume must bring an input that matches it; with
    `max_input_bytes`, one whose JSON encoding takes at most that many bytes (a larger input
    is refused, and the instance stays paused). With `timeout_seconds`, the checkpoint
    expires after that long and `on_expiry` happens (by default the instance fails).
    """

    label: str
    action: str
    params: JSONValue = None
    input_schema: JSONValue = None
    timeout_seconds: float | None = None
    on_expiry: OnExpiry | None = None
    max_input_bytes: int | None = None

    def __post_init__(self) -> None:
        where = f"checkpoint {self.label!r}"
        if self.input_schema is not None:
            check_input_schema(self.input_schema, where)
        check_max_input_bytes(self.max_input_bytes, where)
        check_wait_seconds(self.timeout_seconds, f"{where}: timeout_seconds", optional=True)
        if self.on_expiry is not None:
            if self.timeout_seconds is None:
                raise InvalidInputError(f"{where}: on_expiry needs timeout_seconds")
            check_expiry(self.on_expiry.then, self.on_expiry.input, self.input_schema, where)

    def wait(self) -> dict[str, JSONValue] | None:
        expiry = self.on_expiry
        return checkpoint_wait(
            self.input_schema,
            self.timeout_seconds,
            expiry.then if expiry else None,
            expiry.input if expiry else None,
            self.max_input_bytes,
        )


@dataclass(frozen=True, slots=True)
class Sleep:
    """Checkpoint, then sleep `seconds` on the database clock, holding no lease and no slot;
    then `then` runs with `params`. Survives any process dying; cancel works meanwhile."""

    seconds: float
    then: str
    params: JSONValue = None

    def __post_init__(self) -> None:
        check_wait_seconds(self.seconds, "Sleep seconds")

    def wait(self) -> dict[str, JSONValue]:
        return sleep_wait(self.seconds)


@dataclass(frozen=True, slots=True)
class WaitForSignal:
    """Checkpoint, then wait for the signal `name` (holding no lease and no slot): when it
    comes, `then` runs with its payload as params. A signal sent earlier is kept and taken by
    the first wait of its name, oldest first. After `timeout_seconds` (None: no timeout) with
    no signal, `on_timeout` runs (with no params), or without one the instance fails."""

    name: str
    timeout_seconds: float | None
    then: str
    on_timeout: str | None = None

    def __post_init__(self) -> None:
        check_name(self.name, "signal name")
        check_wait_seconds(self.timeout_seconds, "WaitForSignal timeout_seconds", optional=True)
        if self.on_timeout is not None and self.timeout_seconds is None:
            raise InvalidInputError("WaitForSignal: on_timeout needs timeout_seconds")

    def wait(self) -> dict[str, JSONValue]:
        return signal_wait(self.name, self.timeout_seconds, self.on_timeout)


Step = Next | Done | Pause | Sleep | WaitForSignal


class InstanceTools(Protocol):
    """Durable helpers a handler may use, bound to its instance and fenced by its lease."""

    async def finished_operations(self) -> list[OperationRecord]:
        """The operation outcomes recorded for this instance so far."""
        ...

    async def record_operation(
        self,
        operation: OperationRecord,
        *,
        seconds: float,
        encoded: tuple[str, str] | None = None,
        carried: bool = False,
        report: Callable[[], StageReport] | None = None,
    ) -> None:
        """Record one finished operation: kept until the instance's next write carries it, or
        written soon after on its own (write_operations). `encoded`: its data and metadata
        as JSON text already (else they are encoded here). `carried`: the caller writes
        before anything waits (a sequence's next operation, the step's own write), so no
        write of its own is scheduled. `report`: the running stage's report, asked when an
        outcome is written on its own (the step's own write carries the step's report), which
        that write then carries to the instance too."""
        ...

    async def write_operations(self) -> None:
        """Write the operations recorded so far now, before the next one starts (raises
        LeaseLostError when the lease is gone)."""
        ...

    async def enqueue_child(self, name: str, params: JSONValue, *, key: str | None = None) -> UUID:
        """Enqueue a child instance once per (parent, workflow, key), and return its id: a
        re-run of the handler gets the same child back, and a call with a new key (1-128
        characters) another child, each with its own params. With no key, one child per
        parent and workflow.

        Raises:
            InvalidInputError: a bad key, an unknown workflow or params it refuses.
        """
        ...

    async def signal(
        self,
        instance_id: UUID,
        name: str,
        payload: JSONValue = None,
        *,
        idempotency_key: str | None = None,
    ) -> bool:
        """Send the signal `name` to another instance (its parent, say) as Engine.signal does:
        its wait for the name goes on with `payload` as params, or the signal is kept for its
        next wait. Returns True when sent, False when `idempotency_key` (per target instance)
        had sent it already.

        A re-run of this step (a retry, a lost worker) sends again unless an idempotency_key
        is given, so pass one, e.g. `idempotency_key=f"done:{ctx.instance_id}"`.

        Raises:
            NotFoundError: no such instance.
            ConflictError: the instance has ended.
            InvalidInputError: a bad name or key, or a payload that is not JSON within the
                params limits.
        """
        ...

    async def acquire_lock(
        self, entity_type: str, entity_id: str, ttl_seconds: float
    ) -> LockRecord | None:
        """Take an entity lock for this instance, or None while another holds it."""
        ...

    async def release_lock(self, lock: LockRecord) -> bool:
        """Release a lock this instance holds; False if it had expired and was taken."""
        ...


class PermanentFailure(Exception):  # noqa: N818 - raised by users; reads as what happened
    """Raise from a handler to fail the instance now, without further attempts.

    A plain exception is a failed attempt, retried by the workflow's RetryPolicy; this one
    ends the instance `failed` at once (a crash still counts as an ordinary attempt).
    """


class NotAwaitableError(PermanentFailure):
    """A handler returned what cannot be awaited: a plain `def`, not an `async def`.

    Final, like PermanentFailure: each attempt would run the same code and fail the same way,
    so retrying only spends the budget (and the delays) before the same end. Raised where the
    handler is called, not when the workflow is built: a plain function that returns a
    coroutine (a lambda, a partial) is a handler too.
    """


def not_awaitable(handler: str, returned: object) -> NotAwaitableError:
    """The NotAwaitableError of `handler` (named as its message names it), which returned
    `returned`: one wording wherever a handler or an operation handler is called."""
    return NotAwaitableError(
        f"{handler} returned {type(returned).__name__}, not an awaitable: define it with async def"
    )


class CancelledByRequestError(Exception):
    """Raised by `HandlerContext.raise_if_cancelled` once the instance was cancelled."""


class StoppedForDrainError(Exception):
    """Raised by a step that stops early because its process drains (`HandlerContext.draining`
    is set): a template's sequential stage between two operations, whose outcomes so far it
    wrote first. The runner writes nothing for the step and hands its instance back at once,
    as at a checkpoint while draining: no failed attempt, and the attempt is given back to the
    step's budget. Raised while the process does not drain, it is the step's failure, as any
    exception is."""


def cancel_asked(cancelled: asyncio.Event) -> bool:
    """Whether the run in this task was asked to stop: its instance's cancel flag `cancelled`
    is set, or its task is being cancelled (a cancel, a lost lease, a stop past the grace, a
    parallel sibling's failure). A CancelledError raised with neither is user code's own (an
    awaited task was cancelled): a failure of that code, like any exception it raises."""
    task = asyncio.current_task()
    return cancelled.is_set() or (task is not None and task.cancelling() > 0)


def stopped_here(exc: BaseException, cancelled: asyncio.Event) -> None:
    """Raise `exc` on as the cancellation of this run when it is one: a CancelledError while
    the run was asked to stop (cancel_asked), or the CancelledByRequestError of
    `raise_if_cancelled` then, which is the same stop whose CancelledError was swallowed on
    the way (Python 3.11's asyncio.wait_for can swallow one; so can a handler's own `except`).
    Taken for the handler's failure, a stop at shutdown cost its instance an attempt, and the
    third one failed it for good. Anything else returns: the code's own failure.

    Raises:
        asyncio.CancelledError: `exc` is this run's cancellation.
    """
    if not cancel_asked(cancelled):
        return
    if isinstance(exc, asyncio.CancelledError):
        raise exc
    if isinstance(exc, CancelledByRequestError):
        raise asyncio.CancelledError(str(exc)) from exc


@dataclass(slots=True, kw_only=True)
class HandlerContext:
    """The context one handler call receives.

    `state` is the instance's durable state: mutate it, and the engine checkpoints it after
    the handler returns. A failed attempt is retried with the state of the last checkpoint.

    `draining` is set when the process stops (a shutdown, `laneway worker`'s drain, a newer
    release's migration): the step may finish within the shutdown grace, and the instance is
    handed back at its next checkpoint. A long handler may end its step early (return `Next`)
    when it is set; a template's sequential stage starts no further operation then.
    """

    instance_id: UUID
    name: str
    action: str
    attempt: int
    max_attempts: int
    params: JSONValue
    state: dict[str, JSONValue]
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    draining: asyncio.Event = field(default_factory=asyncio.Event)
    progress: float | None = None
    message: str | None = None
    stage: str | None = None
    tools: InstanceTools | None = None

    @property
    def is_cancelled(self) -> bool:
        """True once a cancel was requested; the handler task is also cancelled."""
        return self.cancelled.is_set()

    def raise_if_cancelled(self) -> None:
        """Stop here if the instance was cancelled."""
        if self.cancelled.is_set():
            raise CancelledByRequestError(f"instance {self.instance_id} was cancelled")

    def report(
        self,
        *,
        progress: float | None = None,
        message: str | None = None,
        stage: str | None = None,
    ) -> None:
        """Record progress (0..1), a status line and the stage, saved with the next checkpoint
        (or with this attempt's failure)."""
        if progress is not None:
            if not 0.0 <= progress <= 1.0:
                raise ValueError("progress must be between 0 and 1")
            self.progress = progress
        if message is not None:
            self.message = storable_text(message[:MAX_REPORT_MESSAGE_CHARS])
        if stage is not None:
            self.stage = storable_text(stage[:200])

    def require_tools(self) -> InstanceTools:
        """The instance's durable helpers; only a context made by the engine has them."""
        if self.tools is None:
            raise RuntimeError("this handler context has no engine behind it")
        return self.tools
