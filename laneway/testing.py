"""Testing your own workflows: mock contexts, one-handler runs, and a pytest plugin.

Owns the helpers that need no database and no pytest: mock handler and operation contexts
(with FakeTools, kept in fake_tools.py), run_handler, run_operation and the steps to compare
with, which a plain script can use (`python operation_check.py`). Re-exports, so that users
import everything from here: FakeTools; EngineFactory and make_timers_due (testing_engines.py);
and, when pytest and pytest-asyncio are installed, the hooks and fixtures of the pytest plugin
(testing_plugin.py), which `pytest_plugins = ["laneway.testing"]` registers from this module.
"""

import inspect
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TypeGuard, cast
from uuid import UUID

from laneway.engine.context import (
    Done,
    HandlerContext,
    InstanceTools,
    Next,
    Pause,
    Sleep,
    Step,
    WaitForSignal,
)
from laneway.engine.handler_map import Handler, check_state_is_dict, start_handler
from laneway.engine.operation_attempt import operation_not_awaitable
from laneway.engine.payloads import MAX_PAYLOAD_BYTES, MAX_STATE_BYTES, decode_json, encode_json
from laneway.engine.template_interpreter import (
    OperationContext,
    OperationHandler,
    OperationResult,
    operation_id_for,
)
from laneway.fake_tools import EnqueuedChild as EnqueuedChild
from laneway.fake_tools import FakeTools as FakeTools
from laneway.fake_tools import SentSignal as SentSignal
from laneway.model import JSONValue
from laneway.testing_engines import EngineFactory as EngineFactory
from laneway.testing_engines import make_timers_due as make_timers_due

# pytest registers a plugin's hooks and fixtures as the attributes of the module it was named
# by: here. They need pytest and pytest-asyncio, which a script using the helpers above may
# not have installed; then there is no plugin, and the helpers work all the same.
try:
    from laneway.testing_plugin import laneway_database_url as laneway_database_url
    from laneway.testing_plugin import laneway_engine_factory as laneway_engine_factory
    from laneway.testing_plugin import laneway_server_url as laneway_server_url
    from laneway.testing_plugin import laneway_template_name as laneway_template_name
    from laneway.testing_plugin import pytest_configure as pytest_configure
    from laneway.testing_plugin import pytest_unconfigure as pytest_unconfigure
except ModuleNotFoundError as missing:
    if missing.name not in ("pytest", "pytest_asyncio"):
        raise

# -- handlers without a database -----------------------------------------------------------------


def mock_context(
    *,
    instance_id: UUID | None = None,
    name: str = "test",
    action: str = "run",
    attempt: int = 1,
    max_attempts: int = 1,
    params: JSONValue = None,
    state: dict[str, JSONValue] | None = None,
    stage: str | None = None,
    tools: InstanceTools | None = None,
) -> HandlerContext:
    """A HandlerContext as the engine would build it, with FakeTools unless `tools` is given."""
    instance_id = instance_id or uuid.uuid4()
    return HandlerContext(
        instance_id=instance_id,
        name=name,
        action=action,
        attempt=attempt,
        max_attempts=max_attempts,
        params=params,
        state={} if state is None else state,
        stage=stage,
        tools=tools if tools is not None else FakeTools(instance_id),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class HandlerRun:
    """What one handler call did: the step it returned, and the context it left behind."""

    step: Step
    context: HandlerContext
    tools: FakeTools

    @property
    def state(self) -> dict[str, JSONValue]:
        """The state after the call: what the engine would checkpoint."""
        return self.context.state


async def run_handler(
    handler: Handler,
    params: JSONValue = None,
    *,
    state: dict[str, JSONValue] | None = None,
    instance_id: UUID | None = None,
    name: str = "test",
    action: str = "run",
    attempt: int = 1,
    max_attempts: int = 1,
    stage: str | None = None,
    tools: FakeTools | None = None,
) -> HandlerRun:
    """Call one handler with a mock context, as the engine would, and return what it did.

    Params and state arrive as the engine's handler gets them from the database (a tuple as
    a list, object keys in jsonb's order, `1e20` as the int `100000000000000000000`), and the
    state and the step's params or result must be what the engine can store: the state a
    dict, as the engine checks with or without a state_validator. `run.step` carries its
    payload as the database gives it back (Done's result, the params of Next, Pause and
    Sleep, the input of a Pause's on_expiry; WaitForSignal carries none):
    `Done({"pair": (1, 2)})` is `done({"pair": [1, 2]})` there. The handler's own exception
    propagates.

    What needs the workflow is not checked here: that a next action is one of its handlers,
    its state_validator, the workflow names of enqueue_child (FakeTools makes up an id for
    any name).

    Raises:
        InvalidStateError: the handler left a ctx.state that is not a dict (it replaced it),
            with the message the engine fails the attempt with.
        InvalidInputError: params, state or the step's payload is not storable JSON.
        NotAwaitableError: the handler returned what cannot be awaited (a plain `def`), as
            the engine fails such an instance.
        TypeError: the handler returned something other than Next, Pause, Sleep,
            WaitForSignal or Done.
    """
    instance_id = instance_id or uuid.uuid4()
    fake = tools if tools is not None else FakeTools(instance_id)
    ctx = mock_context(
        instance_id=instance_id,
        name=name,
        action=action,
        attempt=attempt,
        max_attempts=max_attempts,
        params=decode_json(encode_json(params, what="params")),
        state=decode_json(encode_json(state or {}, what="state", max_bytes=MAX_STATE_BYTES)),
        stage=stage,
        tools=fake,
    )
    returned = await start_handler(handler, ctx, name)
    check_state_is_dict(ctx.state)  # first, as the engine does
    step = _as_stored(returned)
    encode_json(ctx.state, what="state", max_bytes=MAX_STATE_BYTES)
    return HandlerRun(step=step, context=ctx, tools=fake)


def _as_stored(step: object) -> Step:
    """`step` with its payload as the database gives it back, checked as the engine checks
    it before it writes it (runner.py).

    Raises:
        InvalidInputError: the payload is not storable JSON.
        TypeError: `step` is no step.
    """
    if isinstance(step, Done):
        return replace(step, result=_stored(step.result, "result", MAX_PAYLOAD_BYTES))
    if isinstance(step, Next | Sleep):
        return replace(step, params=_stored(step.params, "action params"))
    if isinstance(step, Pause):
        params = _stored(step.params, "action params")
        encode_json(step.wait(), what="wait")  # its schema and its expiry's input, stored
        if step.on_expiry is None:
            return replace(step, params=params)
        # The expiry's input is the params of `action` when the checkpoint expires. The schema
        # is no payload: it is kept, and its properties' order with it (waits.checkpoint_wait).
        expiry = replace(step.on_expiry, input=_stored(step.on_expiry.input, "wait"))
        return replace(step, params=params, on_expiry=expiry)
    if isinstance(step, WaitForSignal):
        return step  # names and seconds only: no payload
    raise TypeError(
        f"handler returned {type(step).__name__}; expected Next(...), Pause(...), "
        "Sleep(...), WaitForSignal(...) or Done(...)"
    )


def _stored(value: JSONValue, what: str, max_bytes: int = MAX_PAYLOAD_BYTES) -> JSONValue:
    """`value` as a jsonb column gives it back.

    Raises:
        InvalidInputError: it is not storable JSON (`what` names it).
    """
    return decode_json(encode_json(value, what=what, max_bytes=max_bytes))


def mock_operation_context(
    *,
    context: Mapping[str, JSONValue] | None = None,
    initial_context: Mapping[str, JSONValue] | None = None,
    instance_id: UUID | None = None,
    operation_type: str = "test",
    stage: str = "test",
    position: int = 0,
    attempt: int = 1,
    max_attempts: int = 1,
    workflow_type: str = "test",
) -> OperationContext:
    """An OperationContext as a template would build it for the operation at `position` of
    `stage`; the initial context defaults to `context`.

    Give it to run_operation, which takes no context of its own:
    `await run_operation(check, mock_operation_context(context={"rows": [1, 2, 3]}))`.
    """
    instance_id = instance_id or uuid.uuid4()
    return OperationContext(
        instance_id=instance_id,
        operation_id=operation_id_for(instance_id, stage, position),
        operation_type=operation_type,
        stage=stage,
        attempt=attempt,
        max_attempts=max_attempts,
        context=dict(context or {}),
        initial_context=dict(initial_context if initial_context is not None else context or {}),
        workflow_type=workflow_type,
    )


async def run_operation(
    handler: OperationHandler, ctx: OperationContext | None = None
) -> OperationResult:
    """Call one operation handler (with `mock_operation_context()` by default), as a
    template would, and return its result.

    The context comes only inside `ctx`: `run_operation(check,
    mock_operation_context(context={"rows": [1, 2, 3]}))`. Unlike run_handler's `params` and
    `state`, there is no `context=` keyword here (`run_operation(check, context={...})` is a
    TypeError).

    The context arrives as it would from the database (see run_handler), and the result must
    be what the engine can store; its data and metadata come back as the database gives them
    (a tuple as a list, `1e20` as an int), as a template stores them in the operation's row
    and, for data, in the context of an instance resumed after it. The handler's own exception
    propagates (a template would record it as a failure), and so does the NotAwaitableError of
    a plain `def`.

    Raises:
        InvalidInputError: the context, or the result's data or metadata, is not storable JSON.
        NotAwaitableError: the handler returned what cannot be awaited.
        TypeError: the handler returned something other than completed(...) or failed(...).
    """
    ctx = ctx or mock_operation_context()
    ctx = replace(
        ctx,
        context=decode_json(encode_json(ctx.context, what="context")),
        initial_context=decode_json(encode_json(ctx.initial_context, what="initial context")),
    )
    called: object = handler(ctx)
    if not inspect.isawaitable(called):
        raise operation_not_awaitable(ctx, called)
    result: object = await called
    if not isinstance(result, OperationResult):
        raise TypeError(
            f"handler returned {type(result).__name__}; expected completed(...) or failed(...)"
        )
    # OperationResult's data is a dict, whose JSON is an object: a dict again.
    data = cast(dict[str, JSONValue], _stored(result.data, "operation data"))
    return replace(result, data=data, metadata=_stored(result.metadata, "operation metadata"))


def next_step(action: str, params: JSONValue = None) -> Next:
    """The step a handler returns to go on with `action`: compare `run.step` against it."""
    return Next(action, params)


def pause_step(label: str, action: str, params: JSONValue = None) -> Pause:
    """The step a handler returns to pause at checkpoint `label`, then run `action`."""
    return Pause(label, action, params)


def done(result: JSONValue = None) -> Done:
    """The step a handler returns to complete its instance with `result`."""
    return Done(result)


def is_next(step: object, action: str | None = None) -> TypeGuard[Next]:
    """True when `step` goes on (to `action`, if given)."""
    return isinstance(step, Next) and (action is None or step.action == action)


def is_done(step: object) -> TypeGuard[Done]:
    """True when `step` completes the instance."""
    return isinstance(step, Done)
