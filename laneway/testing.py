"""Testing your own workflows: mock contexts, one-handler runs, and a pytest plugin.

Owns test-time helpers only: mock handler and operation contexts (with FakeTools, kept in
fake_tools.py and re-exported here), the fixtures of `pytest_plugins = ["laneway.testing"]`:
a migrated throwaway database per test, engines to drive with tick(), and a session that a
SIGTERM ends as Ctrl-C does, so its databases and server are cleaned up; and timers (backoffs,
delays, sleeps, timeouts) made due at once. Needs pytest-asyncio.
"""

import asyncio
import contextlib
import inspect
import os
import signal
import threading
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, replace
from types import FrameType
from typing import TypeGuard, cast
from uuid import UUID

import pytest
import pytest_asyncio

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
from laneway.engine.engine import Engine
from laneway.engine.handler_map import Handler, Workflow, check_state_is_dict, start_handler
from laneway.engine.operation_attempt import operation_not_awaitable
from laneway.engine.payloads import MAX_PAYLOAD_BYTES, MAX_STATE_BYTES, decode_json, encode_json
from laneway.engine.registry import WorkflowRegistry
from laneway.engine.template_interpreter import (
    OperationContext,
    OperationHandler,
    OperationResult,
    check_workflows,
    operation_id_for,
)
from laneway.fake_tools import EnqueuedChild as EnqueuedChild
from laneway.fake_tools import FakeTools as FakeTools
from laneway.fake_tools import SentSignal as SentSignal
from laneway.model import JSONValue
from laneway.store import open_store
from laneway.store.databases import create_database, drop_database, throwaway_server

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
    if isinstance(step, Next):
        return replace(step, params=_stored(step.params, "action params"))
    if isinstance(step, Sleep):
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


# -- the pytest plugin ---------------------------------------------------------------------------

_sigterm_interrupts = pytest.StashKey[bool]()


def _interrupt_on_sigterm(signum: int, frame: FrameType | None) -> None:
    # A repeat must not cut the clean-up short (`timeout` sends SIGTERM twice, a CI runner to
    # every process of the job): it is ignored from now on. SIGKILL still ends a stuck one.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def pytest_configure(config: pytest.Config) -> None:
    """Have SIGTERM (a timeout, a cancelled CI job) end the session as Ctrl-C does.

    A terminated process runs no fixture teardown: the embedded server, its temporary folder
    and the databases on LANEWAY_TEST_DATABASE_URL would stay. An interrupted session tears
    down as usual. Each process does this for itself (xdist workers included, which run
    tests in their main thread); a SIGTERM handler someone else installed is left alone.
    """
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set there
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt_on_sigterm)
        config.stash[_sigterm_interrupts] = True


def pytest_unconfigure(config: pytest.Config) -> None:
    """Give SIGTERM back the default handler it had before the session."""
    if config.stash.get(_sigterm_interrupts, False) and signal.getsignal(signal.SIGTERM) in (
        _interrupt_on_sigterm,
        signal.SIG_IGN,
    ):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.fixture(scope="session")
def laneway_server_url() -> Iterator[str]:
    """Admin URL of the PostgreSQL server for the tests: LANEWAY_TEST_DATABASE_URL when set,
    else an embedded server in a temporary folder, stopped after the session.

    Override this fixture to point the plugin at a server you already have.
    """
    with throwaway_server(os.environ.get("LANEWAY_TEST_DATABASE_URL")) as url:
        yield url


# Session fixtures are synchronous (asyncio.run inside): test event loops are per test.
@pytest.fixture(scope="session")
def laneway_template_name(laneway_server_url: str) -> Iterator[str]:
    """A database migrated once per session, cloned for every test."""
    name = f"laneway_template_{uuid.uuid4().hex[:12]}"
    asyncio.run(create_database(laneway_server_url, name, migrate=True))
    try:
        yield name
    finally:
        asyncio.run(drop_database(laneway_server_url, name))


@pytest_asyncio.fixture
async def laneway_database_url(
    laneway_server_url: str, laneway_template_name: str
) -> AsyncIterator[str]:
    """A fresh, migrated database for one test, dropped after it."""
    name = f"laneway_test_{uuid.uuid4().hex[:12]}"
    url = await create_database(laneway_server_url, name, template=laneway_template_name)
    try:
        yield url
    finally:
        await drop_database(laneway_server_url, name)


class EngineFactory:
    """Builds engines on one test database, each with its own Store, as separate processes
    would have; `aclose` closes them all."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self._stack = contextlib.AsyncExitStack()

    async def __call__(
        self,
        *workflows: Workflow,
        owner_id: str | None = None,
        lease_seconds: float = 30.0,
        poll_interval_seconds: float = 2.0,
        concurrency: int = 100,
    ) -> Engine:
        """An engine that runs `workflows`; drive it with `tick()` or `running()`.

        Raises:
            InvalidInputError: a template is badly wired (an operation type with no handler, a
                checkpoint after no stage, an unregistered next workflow): the start-up check
                of `laneway serve` and `worker`, listing every problem.
        """
        registry = WorkflowRegistry(workflows)
        # As open_services does: a test of a badly wired template fails here, on the wiring,
        # not on one operation after the stages before it ran.
        check_workflows(registry)
        store = await self._stack.enter_async_context(open_store(self.database_url))
        return Engine(
            store,
            registry,
            owner_id=owner_id,
            lease_seconds=lease_seconds,
            poll_interval_seconds=poll_interval_seconds,
            concurrency=concurrency,
        )

    async def aclose(self) -> None:
        await self._stack.aclose()


@pytest_asyncio.fixture
async def laneway_engine_factory(laneway_database_url: str) -> AsyncIterator[EngineFactory]:
    """`await laneway_engine_factory(*workflows, **engine_options)` → an Engine on this
    test's database; its store is closed after the test."""
    factory = EngineFactory(laneway_database_url)
    try:
        yield factory
    finally:
        await factory.aclose()


# -- time: timers made due at once ---------------------------------------------------------------


async def make_timers_due(engine: Engine, *instance_ids: UUID) -> int:
    """Make the timers of these instances (none given: of every instance in the engine's
    database) due now, so that the next `engine.tick()` does what it would once their time came.

    A test of a retry's backoff, a delayed start, a `Sleep`, a signal wait's timeout or a
    checkpoint's expiry then takes no wall-clock time. Only the times move, to the database's
    now: the engine's own wake-up and claim do the rest as if the time had passed (a sleep's
    action runs, a timed-out wait runs its `on_timeout` or fails, an expired checkpoint does
    what its `on_expiry` says). Instances with no timer still to come, running ones and ended
    ones are left alone. This engine, if it runs in the background (`engine.running()`), is
    woken at once; another engine on the database finds the due times at its next poll.

    Returns how many instances had a timer moved.
    """
    moved = await engine.store.make_timers_due(list(instance_ids) if instance_ids else None)
    if moved:
        # The loop timed its next wake-up and claim by the old times: tell it they are now.
        engine.claim_loop.wake_waiters_in(0.0)
        engine.claim_loop.wake_in(0.0)
    return moved
