"""laneway.testing as a user drives it: one-handler runs, FakeTools, and the pytest plugin.

A user writes `pytest_plugins = ["laneway.testing"]` in their root conftest. This suite's root
conftest is tests/conftest.py, so the plugin's fixtures are imported here instead; a test
parameter then shadows the import, hence the F811 waivers.
"""

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, cast

import asyncpg
import pytest

import laneway
from laneway import testing, testing_plugin
from laneway.engine import (
    Done,
    HandlerContext,
    Next,
    OnExpiry,
    Pause,
    RetryPolicy,
    Sleep,
    WaitForSignal,
    Workflow,
)
from laneway.engine.context import NotAwaitableError, Step
from laneway.engine.decorators import with_error_boundary
from laneway.engine.template_interpreter import (
    Operation,
    OperationContext,
    OperationRegistry,
    OperationResult,
    Stage,
    Template,
    compile_template,
    completed,
    failed,
    operation_id_for,
)
from laneway.errors import InvalidInputError
from laneway.model import JSONValue, OperationRecord, Status
from laneway.store.databases import drop_database, stop_leftover_postmaster
from laneway.store.pool import connect
from laneway.testing import (
    EngineFactory,
    EnqueuedChild,
    FakeTools,
    SentSignal,
    done,
    is_done,
    is_next,
    laneway_database_url,  # noqa: F401
    laneway_engine_factory,  # noqa: F401
    laneway_template_name,  # noqa: F401
    make_timers_due,
    mock_context,
    mock_operation_context,
    next_step,
    run_handler,
    run_operation,
)
from tests.engine.helpers import eventually
from tests.miswired_workflows import miswired


@pytest.fixture(scope="session")
def laneway_server_url(server_url: str) -> str:
    """Point the plugin at this suite's server instead of starting a second one per worker."""
    return server_url


async def fetch(ctx: HandlerContext, params: JSONValue) -> Next:
    assert isinstance(params, dict)
    ctx.state["body"] = f"pretend this was downloaded from {params['url']}"
    return Next("count", {"unit": "words"})


async def count(ctx: HandlerContext, params: JSONValue) -> Done:
    assert isinstance(params, dict)
    return Done({params["unit"]: len(ctx.state["body"].split())})


ingest = Workflow(
    "ingest",
    handlers={"fetch": fetch, "count": count},
    initial="fetch",
    retry=RetryPolicy(max_attempts=1),
)


# -- run_handler and the result builders ---------------------------------------------------------


async def test_run_handler_runs_a_two_step_handler_map_one_handler_at_a_time() -> None:
    first = await run_handler(fetch, {"url": "https://example.com"}, action="fetch")
    assert first.step == next_step("count", {"unit": "words"})
    assert first.state == {"body": "pretend this was downloaded from https://example.com"}
    assert is_next(first.step, "count")

    second = await run_handler(count, first.step.params, state=first.state, action="count")
    assert second.step == done({"words": 6})
    assert is_done(second.step)
    assert not is_next(second.step)


async def test_run_handler_gives_the_handler_params_and_state_as_json_would() -> None:
    seen: list[tuple[JSONValue, dict[str, JSONValue]]] = []

    async def handler(ctx: HandlerContext, params: JSONValue) -> Done:
        seen.append((params, dict(ctx.state)))
        return Done()

    state: dict[str, JSONValue] = {"pair": (1, 2)}
    run = await run_handler(handler, {"ids": (3, 4)}, state=state, attempt=2, max_attempts=3)
    assert seen == [({"ids": [3, 4]}, {"pair": [1, 2]})]
    assert state == {"pair": (1, 2)}  # the caller's dict is not the handler's
    assert (run.context.attempt, run.context.max_attempts) == (2, 3)


# Params as the engine's handler gets them, read from jsonb: keys shortest first, then by their
# UTF-8 bytes, a repeated key's last value, and numbers as numerics written out in full.
AS_THE_DATABASE_GIVES_BACK: dict[str, JSONValue] = {
    "nested objects": {"outer": {"bb": 1, "a": {"zz": [{"y": 1, "x": 2}], "y": 2}}, "k": None},
    "unicode keys": {"\U0001f600": 1, "\u20ac": 2, "aaa": 3, "\u00e9": 4, "ab": 5, "z": 6},
    "duplicate keys": {1: "the int key", "1": "the str key", "0": 0},
    "1e20": {"x": 1e20, "bbb": 1, "a": 2},
    "-1e-7": [-1e-7, 1.23e-5, 5e-324],
    "1500.0": 1500.0,
    "1.5e3 from a float": [1.5e3, 1.5e16, float(10**16), 1.7976931348623157e308],
    "big ints": [2**70, -(10**30), 10**400],
    "0.1": {"a": 0.1, "b": 0.30000000000000004, "c": -0.0},
}


@pytest.mark.parametrize(
    "params", AS_THE_DATABASE_GIVES_BACK.values(), ids=AS_THE_DATABASE_GIVES_BACK.keys()
)
async def test_run_handler_gives_the_handler_params_as_the_engines_handler_gets_them(
    laneway_engine_factory: EngineFactory,  # noqa: F811
    params: JSONValue,
) -> None:
    # Found by an outside audit: run_handler gave what json.loads makes of the text (keys in
    # the caller's order, 1e20 a float), the engine what jsonb gives back.
    seen: list[str] = []  # repr: tells 1e20 from 100000000000000000000, and shows key order

    async def echo(ctx: HandlerContext, params: JSONValue) -> Done:
        seen.append(repr(params))
        seen.append(repr(ctx.state.get("as_state")))
        return Done()

    engine = await laneway_engine_factory(Workflow("echo", {"echo": echo}, "echo"))
    await engine.enqueue("echo", params)
    assert await engine.tick() == 1
    await run_handler(echo, params, state={"as_state": params})
    from_engine, _, from_run_handler, as_state = seen
    assert from_run_handler == from_engine
    assert as_state == from_engine  # state goes the same way


async def test_run_handler_refuses_a_plain_def_handler_as_the_engine_does() -> None:
    # Found by an outside audit: awaited directly, a plain def's step raised a TypeError about
    # the await, where the engine fails the instance with a NotAwaitableError saying why.
    def plain(ctx: HandlerContext, params: JSONValue) -> Done:
        return Done()

    with pytest.raises(NotAwaitableError) as raised:
        await run_handler(cast(Any, plain), name="plain", action="a")
    assert str(raised.value) == (
        "handler 'a' of workflow 'plain' returned Done, not an awaitable: define it with async def"
    )


async def test_run_handler_refuses_state_when_the_engine_could_not_store_it() -> None:
    async def handler(ctx: HandlerContext, params: JSONValue) -> Done:
        ctx.state["when"] = object()
        return Done()

    with pytest.raises(InvalidInputError, match="state must be JSON"):
        await run_handler(handler)


async def test_run_handler_refuses_a_state_replaced_by_what_is_not_a_dict_as_the_engine_does(
    laneway_engine_factory: EngineFactory,  # noqa: F811
) -> None:
    # Found by an outside audit: run_handler passed a ctx.state the engine fails the attempt for.
    async def replace_state(ctx: HandlerContext, params: JSONValue) -> Done:
        ctx.state = ["not", "a", "dict"]  # type: ignore[assignment]
        return Done()

    engine = await laneway_engine_factory(
        Workflow("replacer", {"run": replace_state}, "run", retry=RetryPolicy(max_attempts=1))
    )
    enqueued = await engine.enqueue("replacer")
    assert await engine.tick() == 1
    [failure] = (await engine.store.failures([enqueued.instance_id], 10))[enqueued.instance_id]
    with pytest.raises(Exception) as raised:  # noqa: PT011 (the engine's type, checked below)
        await run_handler(replace_state)
    assert (type(raised.value).__name__, str(raised.value)) == (failure.type, failure.message)
    assert isinstance(raised.value, laneway.InvalidStateError)  # a user's pytest.raises names it
    assert failure.message == "ctx.state must be a dict (a JSON object), not list"


async def test_run_handler_refuses_a_return_value_when_it_is_not_a_step() -> None:
    async def handler(ctx: HandlerContext, params: JSONValue) -> Done:
        return "done"  # type: ignore[return-value]

    with pytest.raises(TypeError, match="expected Next"):
        await run_handler(handler)


async def test_run_handler_returns_the_waits_a_handler_asks_for() -> None:
    async def nap(ctx: HandlerContext, params: JSONValue) -> Sleep:
        return Sleep(5, "woke", {"from": params})

    async def ask(ctx: HandlerContext, params: JSONValue) -> WaitForSignal:
        return WaitForSignal("approve", 60, "approved", on_timeout="timed_out")

    napped = await run_handler(nap, (1, 2))
    assert napped.step == Sleep(5, "woke", {"from": [1, 2]})  # params went through JSON
    waited = await run_handler(ask)
    assert waited.step == WaitForSignal("approve", 60, "approved", on_timeout="timed_out")


async def test_run_handler_gives_the_steps_payload_as_the_database_gives_it_back() -> None:
    # Found by an outside audit: params and state went through JSON, a step's payload did not,
    # so `run.step == done({"pair": [1, 2]})` failed for a handler that returned a tuple.
    steps: dict[str, tuple[Step, Step]] = {
        "done": (Done({"pair": (1, 2), "big": 1e20}), done({"big": 10**20, "pair": [1, 2]})),
        "next": (Next("b", {"pair": (1, 2)}), next_step("b", {"pair": [1, 2]})),
        "pause": (
            Pause(
                "review",
                "b",
                (1, 2),
                input_schema={"type": "object"},
                timeout_seconds=60,
                on_expiry=OnExpiry("resume", {"x": (1e20,)}),
            ),
            Pause(
                "review",
                "b",
                [1, 2],
                input_schema={"type": "object"},
                timeout_seconds=60,
                on_expiry=OnExpiry("resume", {"x": [10**20]}),
            ),
        ),
        "sleep": (Sleep(5, "b", {"pair": (1, 2)}), Sleep(5, "b", {"pair": [1, 2]})),
    }
    for returned, stored in steps.values():

        async def handler(ctx: HandlerContext, params: JSONValue, step: Step = returned) -> Step:
            return step

        run = await run_handler(handler)
        assert repr(run.step) == repr(stored)  # repr: a tuple is not a list, 1e20 not an int


async def test_run_handler_gives_a_result_as_the_engine_stores_it(
    laneway_engine_factory: EngineFactory,  # noqa: F811
) -> None:
    result: JSONValue = {"pair": (1, 2), "x": 1e20, "bb": -0.0, "a": {"z": 1, "y": 2}}

    async def finish(ctx: HandlerContext, params: JSONValue) -> Done:
        return Done(result)

    engine = await laneway_engine_factory(Workflow("finish", {"finish": finish}, "finish"))
    enqueued = await engine.enqueue("finish")
    assert await engine.tick() == 1
    instance = await engine.wait(enqueued.instance_id)
    run = await run_handler(finish)
    assert is_done(run.step)
    assert repr(run.step.result) == repr(instance.result)


async def test_run_handler_still_refuses_a_result_the_engine_could_not_store() -> None:
    async def handler(ctx: HandlerContext, params: JSONValue) -> Done:
        return Done("x" * (256 * 1024))

    with pytest.raises(InvalidInputError, match="result is 262146 bytes encoded; the limit"):
        await run_handler(handler)


async def test_run_handler_shows_what_an_error_boundary_returns() -> None:
    async def handler(ctx: HandlerContext, params: JSONValue) -> Next:
        raise RuntimeError("upstream is down")

    run = await run_handler(with_error_boundary()(handler))
    assert run.step == done({"error": "upstream is down"})


async def test_run_handler_lets_the_handlers_exception_propagate() -> None:
    async def handler(ctx: HandlerContext, params: JSONValue) -> Done:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await run_handler(handler)


# -- operation handlers ----------------------------------------------------------------------------


async def count_rows(ctx: OperationContext) -> OperationResult:
    rows = ctx.context.get("rows")
    if not isinstance(rows, list):
        raise ValueError("no rows gathered")
    return completed({"row_count": len(rows)})


async def test_run_operation_returns_what_the_operation_handler_decided() -> None:
    ctx = mock_operation_context(context={"rows": (1, 2, 3)}, stage="analyze")
    result = await run_operation(count_rows, ctx)
    assert result == completed({"row_count": 3})
    assert ctx.operation_id == operation_id_for(ctx.instance_id, "analyze", 0)
    assert ctx.initial_context == {"rows": (1, 2, 3)}


async def test_run_operation_gives_data_and_metadata_as_the_database_gives_them_back() -> None:
    # A template stores an operation's data and metadata as JSON: its row, and the context of
    # an instance resumed after it, hold them as the database gives them back.
    async def pair(ctx: OperationContext) -> OperationResult:
        return completed({"pair": (1, 2), "big": 1e20}, metadata={"took": (3, 4)})

    async def refuse(ctx: OperationContext) -> OperationResult:
        return failed("no", {"tried": (1,)})

    result = await run_operation(pair)
    assert repr(result) == repr(
        completed({"big": 10**20, "pair": [1, 2]}, metadata={"took": [3, 4]})
    )
    assert repr(await run_operation(refuse)) == repr(failed("no", {"tried": [1]}))


async def test_run_operation_shows_what_an_error_boundary_makes_of_a_failure() -> None:
    bounded = with_error_boundary(lambda exc: failed(str(exc), {"retryable": False}))(count_rows)
    result = await run_operation(bounded)
    assert result == failed("no rows gathered", {"retryable": False})


async def test_run_operation_refuses_a_return_value_when_it_is_not_a_result() -> None:
    async def handler(ctx: OperationContext) -> OperationResult:
        return {"ok": True}  # type: ignore[return-value]

    with pytest.raises(TypeError, match=r"expected completed\(\.\.\.\)"):
        await run_operation(handler)


async def test_run_operation_refuses_a_plain_def_handler_as_a_template_does() -> None:
    def plain(ctx: OperationContext) -> OperationResult:
        return completed()

    ctx = mock_operation_context(operation_type="plain", workflow_type="plain_operation")
    with pytest.raises(NotAwaitableError) as raised:
        await run_operation(cast(Any, plain), ctx)
    assert str(raised.value) == (
        "operation handler 'plain' of template 'plain_operation' returned OperationResult,"
        " not an awaitable: define it with async def"
    )


# -- mock_context and FakeTools ------------------------------------------------------------------


async def test_mock_context_tools_record_a_child_enqueued_once_per_workflow() -> None:
    async def spawn(ctx: HandlerContext, params: JSONValue) -> Done:
        tools = ctx.require_tools()
        child_id = await tools.enqueue_child("report", {"for": str(ctx.instance_id)})
        again = await tools.enqueue_child("report", {"ignored": True})
        return Done({"child": str(child_id), "same": child_id == again})

    ctx = mock_context(name="parent", action="spawn")
    step = await spawn(ctx, None)
    tools = ctx.require_tools()
    assert isinstance(tools, FakeTools)
    [child] = tools.children
    assert child == EnqueuedChild(
        name="report", params={"for": str(ctx.instance_id)}, instance_id=child.instance_id
    )
    assert step == Done({"child": str(child.instance_id), "same": True})


async def test_mock_context_tools_record_one_child_per_workflow_and_key() -> None:
    async def fan_out(ctx: HandlerContext, params: JSONValue) -> Done:
        tools = ctx.require_tools()
        ids = [await tools.enqueue_child("kid", {"i": i}, key=str(i)) for i in range(3)]
        again = [await tools.enqueue_child("kid", {"ignored": i}, key=str(i)) for i in range(3)]
        plain = await tools.enqueue_child("kid", {"plain": True})
        return Done({"ids": [str(i) for i in ids], "same": ids == again, "plain": str(plain)})

    ctx = mock_context(name="parent", action="fan_out")
    step = await fan_out(ctx, None)
    tools = ctx.require_tools()
    assert isinstance(tools, FakeTools)
    assert [(c.name, c.params, c.key) for c in tools.children] == [
        ("kid", {"i": 0}, "0"),
        ("kid", {"i": 1}, "1"),
        ("kid", {"i": 2}, "2"),
        ("kid", {"plain": True}, None),
    ]
    assert len({c.instance_id for c in tools.children}) == 4
    ids = [str(c.instance_id) for c in tools.children]
    assert step == Done({"ids": ids[:3], "same": True, "plain": ids[3]})
    with pytest.raises(InvalidInputError, match="child key must be 1-128 characters"):
        await tools.enqueue_child("kid", None, key="")


async def test_mock_context_tools_record_signals_once_per_instance_and_key() -> None:
    parent, other = uuid.uuid4(), uuid.uuid4()

    async def report(ctx: HandlerContext, params: JSONValue) -> Done:
        tools = ctx.require_tools()
        key = f"done:{ctx.instance_id}"
        sent = [
            await tools.signal(parent, "child-done", {"n": 1}, idempotency_key=key),
            await tools.signal(parent, "child-done", {"n": 2}, idempotency_key=key),
            await tools.signal(other, "child-done", {"n": 3}, idempotency_key=key),
            await tools.signal(parent, "progress"),
            await tools.signal(parent, "progress"),
        ]
        return Done(sent)

    run = await run_handler(report, name="child")
    assert run.step == Done([True, False, True, True, True])
    key = f"done:{run.context.instance_id}"
    assert run.tools.signals == [
        SentSignal(instance_id=parent, name="child-done", payload={"n": 1}, idempotency_key=key),
        SentSignal(instance_id=other, name="child-done", payload={"n": 3}, idempotency_key=key),
        SentSignal(instance_id=parent, name="progress", payload=None),
        SentSignal(instance_id=parent, name="progress", payload=None),
    ]
    with pytest.raises(InvalidInputError, match="signal name"):
        await run.tools.signal(parent, "no spaces")
    with pytest.raises(InvalidInputError, match="idempotencyKey must be 1-255 characters"):
        await run.tools.signal(parent, "child-done", idempotency_key="")
    with pytest.raises(InvalidInputError, match="payload"):
        await run.tools.signal(parent, "child-done", float("nan"))
    assert len(run.tools.signals) == 4


def test_mock_context_has_sensible_defaults() -> None:
    ctx = mock_context()
    assert (ctx.name, ctx.action, ctx.attempt, ctx.max_attempts) == ("test", "run", 1, 1)
    assert ctx.params is None
    assert ctx.state == {}
    assert not ctx.is_cancelled
    assert mock_context().instance_id != ctx.instance_id


async def test_fake_tools_lock_is_refused_while_another_instance_holds_it() -> None:
    tools = FakeTools(uuid.uuid4())
    other = tools.occupy("customer", "c-1")
    assert await tools.acquire_lock("customer", "c-1", ttl_seconds=30) is None
    assert await tools.release_lock(other)
    mine = await tools.acquire_lock("customer", "c-1", ttl_seconds=30)
    assert mine is not None
    assert mine.owner_instance == tools.instance_id
    assert mine.fencing_token > other.fencing_token
    again = await tools.acquire_lock("customer", "c-1", ttl_seconds=30)
    assert again is not None
    assert not await tools.release_lock(mine)  # superseded by the re-acquisition
    assert await tools.release_lock(again)
    assert tools.locks == {}


async def test_fake_tools_keep_one_operation_per_stage_and_position() -> None:
    instance_id = uuid.uuid4()
    tools = FakeTools(instance_id)

    def operation(status: str) -> OperationRecord:
        return OperationRecord(
            operation_id=uuid.uuid4(),
            instance_id=instance_id,
            stage="gather",
            position=0,
            type="fetch",
            status=status,
            attempts=1,
            error=None,
            data={"rows": 3},
            metadata=None,
            started_at=None,
            finished_at=None,
        )

    await tools.record_operation(operation("failed"), seconds=0.5)
    await tools.record_operation(operation("completed"), seconds=0.5)
    [recorded] = await tools.finished_operations()
    assert recorded.status == "completed"
    assert recorded.started_at is not None
    assert recorded.finished_at is not None


async def test_fake_tools_keep_the_running_stages_report_as_each_operation_left_it() -> None:
    # What the engine writes to the instance with an outcome written while the stage runs.
    tools = FakeTools(uuid.uuid4())
    seen: list[object] = []

    async def work(ctx: OperationContext) -> OperationResult:
        seen.append(tools.report)
        return completed() if ctx.operation_type == "work" else failed("refused")

    template = Template(
        type="reported",
        stages=[
            Stage(
                name="analyze",
                operations=[
                    Operation(type="work"),
                    Operation(type="optional", critical=False, max_attempts=1),
                    Operation(type="work"),
                ],
            )
        ],
    )
    workflow = compile_template(template, OperationRegistry({"work": work, "optional": work}))
    await run_handler(workflow.handlers["analyze"], {}, tools=tools)
    assert seen == [
        None,
        ("analyze", pytest.approx(1 / 3), "analyze: 1 of 3 operations done"),
        ("analyze", pytest.approx(1 / 3), "analyze: 1 of 3 operations done (1 failed)"),
    ]
    assert tools.report is not None
    stage, progress, message = tools.report
    assert (stage, message) == ("analyze", "analyze: 2 of 3 operations done (1 failed)")
    assert progress == pytest.approx(2 / 3)


# -- without pytest: the helpers in a plain script ------------------------------------------------

WITHOUT_PYTEST = """
import asyncio
import sys

for name in sys.argv[1:]:
    sys.modules[name] = None  # an import of it raises ModuleNotFoundError, as if not installed

import laneway.testing
from laneway import Done, completed
from laneway.testing import (
    FakeTools, done, is_done, mock_context, mock_operation_context, run_handler, run_operation
)


async def check(ctx):
    return completed({"total": sum(ctx.context["rows"])})


async def finish(ctx, params):
    await ctx.tools.enqueue_child("child", params)
    return Done({"pair": (1, 2)})


async def main():
    ctx = mock_operation_context(context={"rows": [1, 2, 3]})
    assert await run_operation(check, ctx) == completed({"total": 6})
    run = await run_handler(finish, {"n": 1})
    assert is_done(run.step) and run.step == done({"pair": [1, 2]})
    assert isinstance(run.tools, FakeTools) and run.tools.children[0].name == "child"
    assert mock_context().state == {}
    print(sorted(n for n in vars(laneway.testing) if n.startswith(("laneway_", "pytest_"))))


asyncio.run(main())
"""


@pytest.mark.parametrize(
    "missing", [("pytest", "pytest_asyncio"), ("pytest_asyncio",)], ids=["neither", "no-asyncio"]
)
def test_the_helpers_import_and_work_without_pytest(tmp_path: Path, missing: tuple[str]) -> None:
    # Found by an outside audit: `import laneway.testing` imported pytest and pytest_asyncio for
    # its plugin, so the README's `python operation_check.py` failed in a venv with only the
    # wheel (ModuleNotFoundError: No module named 'pytest').
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST_"))}
    env["PYTHONPATH"] = str(Path(laneway.__file__).resolve().parents[1])  # this laneway
    ran = subprocess.run(
        [sys.executable, "-c", WITHOUT_PYTEST, *missing],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[]"  # no plugin: its hooks and fixtures need both


def test_the_plugins_hooks_and_fixtures_are_laneway_testings_attributes() -> None:
    # `pytest_plugins = ["laneway.testing"]` registers what that module holds: with pytest
    # installed, the plugin module's hooks and fixtures are there (the session test below
    # runs such a project).
    names = [
        "laneway_server_url",
        "laneway_template_name",
        "laneway_database_url",
        "laneway_engine_factory",
        "pytest_configure",
        "pytest_unconfigure",
    ]
    for name in names:
        assert getattr(testing, name) is getattr(testing_plugin, name), name


# -- the plugin: a throwaway database and engines driven by tick() --------------------------------


async def test_engine_factory_engine_completes_an_instance_when_ticked(
    laneway_engine_factory: EngineFactory,  # noqa: F811
) -> None:
    engine = await laneway_engine_factory(ingest)
    enqueued = await engine.enqueue("ingest", {"url": "https://example.com"})
    assert await engine.tick() == 1
    record = await engine.get(enqueued.instance_id)
    assert record is not None
    assert record.status == Status.COMPLETED
    assert record.result == {"words": 6}


async def test_engine_factory_engines_share_the_tests_database(
    laneway_engine_factory: EngineFactory,  # noqa: F811
) -> None:
    producer = await laneway_engine_factory(ingest, owner_id="producer")
    worker = await laneway_engine_factory(ingest, owner_id="worker")
    enqueued = await producer.enqueue("ingest", {"url": "https://example.com"})
    assert await worker.tick() == 1
    record = await producer.get(enqueued.instance_id)
    assert record is not None
    assert record.status == Status.COMPLETED


async def test_engine_factory_refuses_a_badly_wired_template_as_start_up_does(
    laneway_engine_factory: EngineFactory,  # noqa: F811
) -> None:
    # The same check and message as `laneway serve` and `worker` (open_services), so a
    # user's test fails on the wiring, not later on one operation at run time.
    with pytest.raises(InvalidInputError) as raised:
        await laneway_engine_factory(miswired)
    assert str(raised.value).splitlines() == [
        "2 template problem(s):",
        "  - template 'miswired', stage 'only': no handler for operation type 'unhandled'",
        "  - template 'miswired': next_workflow 'nowhere' is not registered",
    ]


async def test_laneway_database_url_is_migrated_and_empty(
    laneway_database_url: str,  # noqa: F811
) -> None:
    conn = await connect(laneway_database_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM laneway.instances") == 0
    finally:
        await conn.close()


# -- the plugin: timers made due at once ---------------------------------------------------------

BACKOFF_MS = 1000.0


async def nap(ctx: HandlerContext, params: JSONValue) -> Sleep:
    return Sleep(3600, "wake", {"slept": 3600})


async def wake(ctx: HandlerContext, params: JSONValue) -> Done:
    return Done(params)


sleeper = Workflow("sleeper", handlers={"nap": nap, "wake": wake}, initial="nap")


async def await_signal(ctx: HandlerContext, params: JSONValue) -> WaitForSignal:
    assert isinstance(params, dict)
    timeout, on_timeout = params["timeout"], params["on_timeout"]
    assert timeout is None or isinstance(timeout, int)
    assert on_timeout is None or isinstance(on_timeout, str)
    return WaitForSignal("paid", timeout, "ship", on_timeout=on_timeout)


async def ship(ctx: HandlerContext, params: JSONValue) -> Done:
    return Done({"shipped": True})


async def give_up(ctx: HandlerContext, params: JSONValue) -> Done:
    return Done({"shipped": False})


order = Workflow(
    "order",
    handlers={"charge": await_signal, "ship": ship, "give_up": give_up},
    initial="charge",
)


async def test_make_timers_due_runs_a_retry_without_waiting_out_its_backoff(
    laneway_engine_factory: EngineFactory,  # noqa: F811
) -> None:
    calls: list[int] = []

    async def flaky(ctx: HandlerContext, params: JSONValue) -> Done:
        calls.append(ctx.attempt)
        if len(calls) < 3:
            raise RuntimeError(f"call {len(calls)} failed")
        return Done({"calls": len(calls)})

    retry = RetryPolicy(max_attempts=3, backoff="fixed", base_ms=BACKOFF_MS)
    engine = await laneway_engine_factory(
        Workflow("flaky", handlers={"run": flaky}, initial="run", retry=retry)
    )
    enqueued = await engine.enqueue("flaky")
    started = time.monotonic()
    assert await engine.tick() == 1  # the first attempt fails: the next is a backoff away
    assert await engine.tick() == 0  # and not due yet
    assert await make_timers_due(engine, enqueued.instance_id) == 1
    assert await engine.tick() == 1  # the second attempt fails
    assert await make_timers_due(engine, enqueued.instance_id) == 1
    assert await engine.tick() == 1  # the third completes
    elapsed = time.monotonic() - started
    record = await engine.get(enqueued.instance_id)
    assert record is not None
    assert (record.status, record.attempts, record.result) == (Status.COMPLETED, 3, {"calls": 3})
    assert calls == [1, 2, 3]  # each retry counted as one, as after a real backoff
    assert elapsed < BACKOFF_MS / 1000  # two backoffs, and not even one waited out


async def test_make_timers_due_ends_a_sleep_of_an_hour(
    laneway_engine_factory: EngineFactory,  # noqa: F811
) -> None:
    engine = await laneway_engine_factory(sleeper)
    enqueued = await engine.enqueue("sleeper")
    assert await engine.tick() == 1
    record = await engine.get(enqueued.instance_id)
    assert record is not None
    assert record.status == Status.WAITING
    assert await engine.tick() == 0  # the hour has not passed
    assert await make_timers_due(engine) == 1  # no ids: every instance with a timer
    assert await engine.tick() == 1
    record = await engine.get(enqueued.instance_id)
    assert record is not None
    assert (record.status, record.result) == (Status.COMPLETED, {"slept": 3600})
    # Woken by the engine's own wake-up, as when the hour passes: a `resumed` event.
    types = [event.type for event in await engine.events(enqueued.instance_id)]
    assert "resumed" in types


@pytest.mark.parametrize(
    ("on_timeout", "status", "result", "error"),
    [
        ("give_up", Status.COMPLETED, {"shipped": False}, None),
        (
            None,
            Status.FAILED,
            None,
            "SignalTimeout: timed out after 3600 s waiting for signal 'paid'",
        ),
    ],
)
async def test_make_timers_due_times_a_signal_wait_out_as_its_timeout_says(
    laneway_engine_factory: EngineFactory,  # noqa: F811
    on_timeout: str | None,
    status: Status,
    result: JSONValue,
    error: str | None,
) -> None:
    engine = await laneway_engine_factory(order)
    enqueued = await engine.enqueue("order", {"timeout": 3600, "on_timeout": on_timeout})
    assert await engine.tick() == 1
    assert await make_timers_due(engine, enqueued.instance_id) == 1
    await engine.tick()
    record = await engine.get(enqueued.instance_id)
    assert record is not None
    assert (record.status, record.result, record.last_error) == (status, result, error)


async def test_make_timers_due_expires_a_checkpoint_as_its_on_expiry_says(
    laneway_engine_factory: EngineFactory,  # noqa: F811
) -> None:
    async def draft(ctx: HandlerContext, params: JSONValue) -> Pause:
        expiry = OnExpiry("resume", {"decision": "reject"})
        return Pause("decide", "publish", timeout_seconds=3600, on_expiry=expiry)

    async def publish(ctx: HandlerContext, decision: JSONValue) -> Done:
        return Done(decision)

    engine = await laneway_engine_factory(
        Workflow("post", handlers={"draft": draft, "publish": publish}, initial="draft")
    )
    enqueued = await engine.enqueue("post")
    assert await engine.tick() == 1
    assert await make_timers_due(engine, enqueued.instance_id) == 1
    assert await engine.tick() == 1
    record = await engine.get(enqueued.instance_id)
    assert record is not None
    assert (record.status, record.result) == (Status.COMPLETED, {"decision": "reject"})


async def test_make_timers_due_leaves_instances_without_a_timer_to_come_alone(
    laneway_engine_factory: EngineFactory,  # noqa: F811
    laneway_database_url: str,  # noqa: F811
) -> None:
    release = asyncio.Event()

    async def block(ctx: HandlerContext, params: JSONValue) -> Done:
        await release.wait()
        return Done(None)

    engine = await laneway_engine_factory(ingest, order)
    completed = (await engine.enqueue("ingest", {"url": "https://example.com"})).instance_id
    forever = (await engine.enqueue("order", {"timeout": None, "on_timeout": None})).instance_id
    assert await engine.tick() == 2  # one completed, one waits for a signal with no timeout
    blocker = await laneway_engine_factory(
        Workflow("block", handlers={"run": block}, initial="run")
    )
    running = (await blocker.enqueue("block")).instance_id
    ticking = asyncio.create_task(blocker.tick())
    due_now = (await engine.enqueue("ingest", {"url": "https://example.com"})).instance_id
    delayed = (await engine.enqueue("ingest", {"url": "x"}, delay_ms=3_600_000)).instance_id
    conn = await connect(laneway_database_url)
    try:
        await eventually(
            lambda: conn.fetchval(
                "SELECT status FROM laneway.instances WHERE instance_id = $1", running
            ),
            lambda status: status == "running",
        )
        # Future times on a running and a completed instance: what makes them due is never
        # time, so they must stay as they are.
        await conn.execute(
            "UPDATE laneway.instances SET run_after = now() + interval '1 hour',"
            " wake_at = now() + interval '1 hour' WHERE instance_id = ANY($1::uuid[])",
            [running, completed],
        )
        rows = "SELECT instance_id, status, run_after, wake_at, updated_at FROM laneway.instances"
        before = {row["instance_id"]: dict(row) for row in await conn.fetch(rows)}
        untouched = [completed, forever, running, due_now]
        assert await make_timers_due(engine, *untouched) == 0
        assert await make_timers_due(engine) == 1  # the delayed one only
        after = {row["instance_id"]: dict(row) for row in await conn.fetch(rows)}
        now = await conn.fetchval("SELECT now()")
    finally:
        await conn.close()
        release.set()
        await ticking
    assert {i: after[i] for i in untouched} == {i: before[i] for i in untouched}
    assert before[delayed]["run_after"] > now  # an hour away
    assert after[delayed]["run_after"] <= now  # due
    assert after[delayed]["status"] == "pending"


async def test_make_timers_due_wakes_an_engine_running_in_the_background(
    laneway_engine_factory: EngineFactory,  # noqa: F811
) -> None:
    # A poll far later than the wait below: the engine must act on being told, not on a poll.
    engine = await laneway_engine_factory(sleeper, poll_interval_seconds=600)
    async with engine.running():
        enqueued = await engine.enqueue("sleeper")
        await eventually(
            lambda: engine.get(enqueued.instance_id),
            lambda record: record is not None and record.status == Status.WAITING,
        )
        assert await make_timers_due(engine, enqueued.instance_id) == 1
        record = await engine.wait(enqueued.instance_id, timeout=10)
    assert (record.status, record.result) == (Status.COMPLETED, {"slept": 3600})


# -- the plugin: a session ended by SIGTERM cleans up as one ended by Ctrl-C ---------------------

# A user's test that is still running when the session gets SIGTERM: it says which database,
# template and server it got, then waits for ever.
STUCK_TEST = """
import asyncio, json, os
from urllib.parse import urlsplit

import asyncpg

async def test_stuck(laneway_database_url, laneway_template_name):
    conn = await asyncpg.connect(laneway_database_url)
    try:
        data_directory = await conn.fetchval("SHOW data_directory")
    finally:
        await conn.close()
    started = {
        "database": urlsplit(laneway_database_url).path.lstrip("/"),
        "template": laneway_template_name,
        "data_directory": data_directory,
    }
    with open("started.json.tmp", "w") as out:
        json.dump(started, out)
    os.rename("started.json.tmp", "started.json")
    await asyncio.Event().wait()
"""


def user_project(folder: Path, server_url: str | None) -> dict[str, str]:
    """Write a project that uses the plugin into `folder`; return the environment to run it."""
    (folder / "conftest.py").write_text('pytest_plugins = ["laneway.testing"]\n')
    (folder / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    (folder / "test_stuck.py").write_text(STUCK_TEST)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LANEWAY_", "DATABASE_", "PYTEST_"))
    }
    env["PYTHONPATH"] = str(Path(laneway.__file__).resolve().parents[1])  # this laneway
    if server_url is not None:
        env["LANEWAY_TEST_DATABASE_URL"] = server_url
    return env


def started_test(folder: Path) -> dict[str, str] | None:
    """What the stuck test got, once it runs."""
    started = folder / "started.json"
    got: dict[str, str] | None = json.loads(started.read_text()) if started.exists() else None
    return got


def postmaster_pid(data_directory: str) -> int:
    return int(Path(data_directory, "postmaster.pid").read_text().split()[0])


def postmaster_runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def remove_server(data_directory: str) -> None:
    stop_leftover_postmaster(Path(data_directory))
    shutil.rmtree(Path(data_directory).parent, ignore_errors=True)


def folder_exists(data_directory: str) -> bool:
    return Path(data_directory).parent.exists()


async def databases_named(server_url: str, names: list[str]) -> list[str]:
    conn = await asyncpg.connect(server_url)
    try:
        rows = await conn.fetch("SELECT datname FROM pg_database WHERE datname = ANY($1)", names)
    finally:
        await conn.close()
    return sorted(row["datname"] for row in rows)


@pytest.mark.parametrize(
    ("embedded", "workers"),
    [(True, 0), (False, 0), (False, 2)],
    ids=["embedded server", "LANEWAY_TEST_DATABASE_URL", "xdist workers"],
)
async def test_a_session_ended_by_sigterm_leaves_no_databases_or_server(
    tmp_path: Path, server_url: str, embedded: bool, workers: int
) -> None:
    env = user_project(tmp_path, None if embedded else server_url)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_stuck.py"]
    argv += ["-n", str(workers)] if workers else []
    log = tmp_path / "session.log"
    with log.open("wb") as out:
        # With workers, the whole process group gets SIGTERM, as from `timeout` or a cancelled
        # CI job: each worker tears its own session down.
        session = await asyncio.create_subprocess_exec(
            *argv,
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=bool(workers),
        )

    async def test_started() -> dict[str, str] | None:
        assert session.returncode is None, log.read_text()
        return started_test(tmp_path)

    try:
        got = await eventually(test_started, bool, timeout=120)
        assert got is not None
        postmaster = postmaster_pid(got["data_directory"]) if embedded else 0
        if workers:
            os.killpg(session.pid, signal.SIGTERM)
        else:
            session.send_signal(signal.SIGTERM)
        async with asyncio.timeout(60):
            returncode = await session.wait()
        databases_left = await databases_named(server_url, [got["database"], got["template"]])
        if embedded:

            async def stopped() -> bool:
                return not postmaster_runs(postmaster)

            await eventually(stopped, bool, timeout=15)  # not our child: init reaps it
            assert not folder_exists(got["data_directory"])
    finally:
        if session.returncode is None:
            if workers:
                os.killpg(session.pid, signal.SIGKILL)
            else:
                session.kill()
            await session.wait()
        # Whatever a failed clean-up left, so that this test leaks nothing itself.
        if (left := started_test(tmp_path)) is not None and embedded:
            remove_server(left["data_directory"])
        elif left is not None:
            for name in (left["database"], left["template"]):
                await drop_database(server_url, name)
    assert returncode == pytest.ExitCode.INTERRUPTED, log.read_text()  # not killed: torn down
    assert databases_left == []
