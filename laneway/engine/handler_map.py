"""Workflow definitions (handler maps) and their validation; no I/O.

Owns the authoring API: Workflow, RetryPolicy and the handler and hook signatures. How an
instance is run lives in runner.py.
"""

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from laneway.engine.backoff import BackoffKind, retry_delay_ms
from laneway.engine.context import HandlerContext, Step, not_awaitable
from laneway.engine.names import check_name as check_name
from laneway.engine.names import check_version
from laneway.errors import InvalidInputError
from laneway.model import InstanceRecord, JSONValue

Handler = Callable[[HandlerContext, JSONValue], Awaitable[Step]]
TerminalHook = Callable[[InstanceRecord], Awaitable[None]]


def start_handler(handler: Handler, ctx: HandlerContext, workflow: str) -> Awaitable[object]:
    """Call a handler of `workflow` with `ctx` and its params, as the runner does and
    laneway.testing.run_handler too, so that both refuse a plain `def` alike: what it
    returned, to await.

    Raises:
        NotAwaitableError: the handler returned what cannot be awaited.
    """
    called: object = handler(ctx, ctx.params)
    if not inspect.isawaitable(called):
        raise not_awaitable(f"handler {ctx.action!r} of workflow {workflow!r}", called)
    return called


class PydanticLikeModel(Protocol):
    """A pydantic v2 model class, used as a params validator."""

    @classmethod
    def model_validate(cls, obj: Any) -> Any: ...


Validator = Callable[[JSONValue], JSONValue] | type[PydanticLikeModel]


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How often an action is attempted, and how long to wait between attempts."""

    max_attempts: int = 3
    backoff: BackoffKind = "exponential"
    base_ms: float = 1000.0
    max_ms: float = 300_000.0

    def __post_init__(self) -> None:
        if not 1 <= self.max_attempts <= 100:
            raise InvalidInputError("max_attempts must be between 1 and 100")
        if self.backoff not in ("fixed", "exponential"):
            raise InvalidInputError("backoff must be 'fixed' or 'exponential'")
        if self.base_ms < 0 or self.max_ms < self.base_ms:
            raise InvalidInputError("need 0 <= base_ms <= max_ms")

    def delay_ms(self, attempt: int) -> float:
        """The wait after failed attempt number `attempt` (1-based)."""
        return retry_delay_ms(self.backoff, self.base_ms, self.max_ms, attempt)


@dataclass(frozen=True, slots=True)
class Workflow:
    """A handler-map workflow: named async handlers, one of which starts each instance.

    A handler gets the context and the params of its action, and returns `Next(action,
    params)` or `Done(result)`. After every handler the engine checkpoints the state and
    the next action, so a crash resumes from there. A `state_validator` (a pydantic model or
    a callable, like `validator` for the params) checks the state each handler leaves before
    it is checkpointed: a state it refuses fails that attempt, and is never checkpointed.

    `version` (default "1") is recorded with every instance it starts, and only a process
    that registered this version runs them: register a new version beside the old one
    while old instances are in flight (see the README's deploy checklist).
    """

    name: str
    handlers: Mapping[str, Handler]
    initial: str
    queue: str | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    validator: Validator | None = None
    on_terminal: TerminalHook | None = None
    description: str = ""
    state_validator: Validator | None = None
    version: str = "1"

    def __post_init__(self) -> None:
        check_name(self.name, "workflow name")
        object.__setattr__(self, "version", check_version(self.version, "workflow version"))
        if self.queue is not None:
            check_name(self.queue, "queue name")
        if not self.handlers:
            raise InvalidInputError(f"workflow {self.name!r} has no handlers")
        for action, handler in self.handlers.items():
            check_name(action, "action name")
            if not callable(handler):
                raise InvalidInputError(f"handler {action!r} of {self.name!r} is not callable")
        if self.initial not in self.handlers:
            raise InvalidInputError(
                f"initial action {self.initial!r} of {self.name!r} is not one of its handlers"
            )

    @property
    def queue_name(self) -> str:
        """The queue instances run in unless an enqueue names another: by default, the name."""
        return self.queue or self.name

    @property
    def kind(self) -> str:
        """`handlers` for a handler map; `template` for a compiled template."""
        return "handlers"

    @property
    def stages(self) -> list[str]:
        """Stage names; a handler map has none."""
        return []

    def validate_params(self, params: JSONValue) -> JSONValue:
        """Run the validator over enqueue params; return the value to store.

        Raises:
            InvalidInputError: the validator rejected the params.
        """
        if self.validator is None:
            return params
        return _validated(self.validator, params, f"params rejected by {self.name!r}")

    def retry_params(self, action: str, params: JSONValue, state: JSONValue) -> JSONValue:
        """The params `action` gets again when retryWorkflow re-runs it, after the wait it
        returned failed the instance (a signal timeout, an expired checkpoint): the params it
        ran with, so it waits again. `state` is what it left."""
        return params

    def check_state(self, state: JSONValue) -> None:
        """Run the state validator over the state a handler left, before it is checkpointed
        (the state stays as the handler left it).

        Raises:
            InvalidStateError: it is not a dict (ctx.state replaced by another value), or the
                validator rejected it; the message names what (a pydantic model's error names
                each field). The attempt fails.
        """
        check_state_is_dict(state)
        if self.state_validator is None:
            return
        try:
            _validated(self.state_validator, state, f"state rejected by {self.name!r}")
        except InvalidInputError as exc:
            raise InvalidStateError(str(exc)) from None


class InvalidStateError(Exception):
    """The state a handler left is not a dict, or failed its workflow's state validator: a
    failed attempt."""


def check_state_is_dict(state: object) -> None:
    """The check of every state a handler leaves, validator or not, made by Workflow.check_state
    and by laneway.testing.run_handler, which has no workflow.

    Raises:
        InvalidStateError: it is not a dict (ctx.state replaced by another value).
    """
    if not isinstance(state, dict):  # every handler gets a dict: the next one would break
        raise InvalidStateError(
            f"ctx.state must be a dict (a JSON object), not {type(state).__name__}"
        )


def _validated(validator: Validator, value: JSONValue, what: str) -> JSONValue:
    """What a validator (a pydantic model or a callable) makes of `value`.

    Raises:
        InvalidInputError: it refused the value (`what`, then its own message).
    """
    model_validate = getattr(validator, "model_validate", None)
    try:
        if model_validate is not None:
            validated = model_validate(value)
            dump = getattr(validated, "model_dump", None)
            return dump(mode="json") if dump is not None else validated
        return cast(Callable[[JSONValue], JSONValue], validator)(value)
    except InvalidInputError:
        raise
    except Exception as exc:  # the validator's own error is the message
        raise InvalidInputError(f"{what}: {exc}") from None
