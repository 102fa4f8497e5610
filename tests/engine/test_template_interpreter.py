"""Templates (issue #4): stages, operations, checkpoints, fix-verify, retry, chaining, crashes.

Pure decisions are tested without I/O; everything else runs on a real PostgreSQL through the
Engine, driven by tick() or running(), with events as gates instead of sleeps.
"""

import asyncio
import contextvars
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from uuid import UUID

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from laneway.engine import Done, HandlerContext, RetryPolicy, Workflow, WorkflowRegistry
from laneway.engine.context import Next, Pause
from laneway.engine.template_interpreter import (
    FIX_POSITION_BASE,
    Checkpoint,
    Operation,
    OperationContext,
    OperationHandler,
    OperationRegistry,
    OperationResult,
    QueueSettings,
    Stage,
    Template,
    TemplateWorkflow,
    check_templates,
    check_workflows,
    child_params,
    compile_template,
    completed,
    failed,
    merge_context,
    operation_id_for,
    stage_message,
    stage_progress,
    step_after_stage,
    templates_of,
    validate,
)
from laneway.errors import ConflictError, InvalidInputError
from laneway.model import EventType, JSONValue, OperationRecord, Status
from laneway.store import Store, open_store
from tests.engine.helpers import eventually, make_engine, types_of

NO_RETRY = RetryPolicy(max_attempts=1)
_ID = UUID(int=1)


def fast(operation_type: str, **options: Any) -> Operation:
    """An operation whose in-stage retries do not wait."""
    return Operation(type=operation_type, retry_base_ms=0, retry_max_ms=0, **options)


def returning(
    calls: list[OperationContext], data: dict[str, JSONValue] | None = None
) -> OperationHandler:
    async def handle(ctx: OperationContext) -> OperationResult:
        calls.append(ctx)
        return completed(data or {})

    return handle


def counts(calls: list[OperationContext]) -> Counter[str]:
    return Counter(ctx.operation_type for ctx in calls)


def by_slot(records: list[OperationRecord]) -> dict[tuple[str, int], OperationRecord]:
    return {(r.stage, r.position): r for r in records}


# -- definitions and pure decisions -------------------------------------------------------------


def _one_stage(**options: Any) -> Template:
    return Template(type="t", stages=[Stage(name="s", operations=[fast("x")])], **options)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Template(type="t", stages=[]), "has no stages"),
        (
            lambda: Template(
                type="t",
                stages=[
                    Stage(name="s", operations=[fast("x")]),
                    Stage(name="s", operations=[fast("y")]),
                ],
            ),
            "repeats stage names",
        ),
        (lambda: Template(type="bad name!", stages=[]), "template type"),
        (lambda: _one_stage(version=0), "version"),
        (lambda: _one_stage(estimated_seconds=-1.0), "estimated_seconds"),
        (lambda: _one_stage(next_workflow="not ok!"), "next workflow"),
        (lambda: Stage(name="s", operations=[]), "has no operations"),
        (lambda: Stage(name="s", operations=[fast("x")], max_fix_cycles=-1), "max_fix_cycles"),
        (lambda: Operation(type="x", timeout_seconds=0), "timeout_seconds"),
        (lambda: Operation(type="x", max_attempts=0), "max_attempts"),
        (lambda: Operation(type="x", retry_base_ms=10, retry_max_ms=1), "retry_base_ms"),
        (lambda: Checkpoint(after_stage="s", label="no spaces"), "checkpoint label"),
        (lambda: QueueSettings(concurrency=0), "concurrency"),
        (
            lambda: QueueSettings(concurrency=1, rate_per_minute=5e-324),
            r"^queue rate_per_minute must be at least 0.0001 and at most 1000000000",
        ),
        # Wiring that would fail only at run time, after the stages before it ran:
        (
            lambda: Stage(name="s", operations=[fast("x")], condition=True),  # type: ignore[arg-type]
            r"^stage 's': condition must be callable \(a predicate on the context\) or None, "
            r"not True$",
        ),
        (
            lambda: Operation(type="x", condition="yes"),  # type: ignore[arg-type]
            r"^operation 'x': condition must be callable .* not 'yes'$",
        ),
        (
            lambda: Checkpoint(after_stage="s", label="look", condition=1),  # type: ignore[arg-type]
            r"^checkpoint 'look': condition must be callable .* not 1$",
        ),
        (
            lambda: _one_stage(next_workflow="n", next_params={"a": {1, 2}}),
            r"^template 't': next_params must be JSON: ",
        ),
        (
            lambda: _one_stage(next_params=[("a", 1)]),
            r"^template 't': next_params must be a JSON object \(a mapping\), not \[",
        ),
        (
            lambda: Stage(name="s", operations=[fast("x")], max_fix_cycles=True),
            r"^stage 's': max_fix_cycles must be a whole number, not True$",
        ),
        (
            lambda: Stage(name="s", operations=[fast("x")], max_fix_cycles=1.5),  # type: ignore[arg-type]
            r"^stage 's': max_fix_cycles must be a whole number, not 1.5$",
        ),
        (
            lambda: Stage(
                name="s", operations=[fast("x")], fix_operations=[fast("y")], max_fix_cycles=0
            ),
            r"^stage 's': fix_operations never run with max_fix_cycles=0",
        ),
        (
            lambda: Stage(name="s", operations=[fast("x")], max_fix_cycles=3),
            r"^stage 's': max_fix_cycles=3 has no effect without fix_operations",
        ),
        (
            lambda: _one_stage(
                checkpoints=[
                    Checkpoint(after_stage="s", label="look"),
                    Checkpoint(after_stage="s", label="look"),
                ]
            ),
            r"^template 't' repeats checkpoint labels \['look'\]",
        ),
    ],
)
def test_definition_is_refused_when_its_shape_is_wrong(
    build: Callable[[], object], message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        build()


def test_definition_is_accepted_when_fix_cycles_have_nothing_to_contradict() -> None:
    # The default (1) and an explicit 0 say nothing a stage without fix operations does not do.
    assert Stage(name="s", operations=[fast("x")]).max_fix_cycles == 1
    assert Stage(name="s", operations=[fast("x")], max_fix_cycles=0).max_fix_cycles == 0
    stage = Stage(name="s", operations=[fast("x")], fix_operations=[fast("y")], max_fix_cycles=2)
    assert stage.max_fix_cycles == 2
    ok = _one_stage(
        checkpoints=[Checkpoint(after_stage="s", label="a", condition=lambda c: True)],
        next_workflow="n",
        next_params={"a": [1, 2]},
    )
    assert ok.next_params == {"a": [1, 2]}


def _wired(**options: Any) -> Template:
    return Template(
        type="report",
        stages=[
            Stage(name="gather", operations=[fast("fetch")]),
            Stage(name="analyze", operations=[fast("score")], fix_operations=[fast("repair")]),
        ],
        **options,
    )


def test_validate_lists_every_problem_at_once_when_wiring_is_wrong() -> None:
    broken = _wired(
        checkpoints=[Checkpoint(after_stage="gahter", label="data_ready")],
        next_workflow="helo",
    )
    problems = validate([broken, _wired()], {"fetch"}, {"report", "hello"})
    assert problems == [
        "template 'report', stage 'analyze': no handler for operation type 'score'",
        "template 'report', stage 'analyze': no handler for operation type 'repair'",
        "template 'report': checkpoint 'data_ready' follows unknown stage 'gahter'",
        "template 'report': next_workflow 'helo' is not registered",
        "template 'report' is defined twice",
        "template 'report', stage 'analyze': no handler for operation type 'score'",
        "template 'report', stage 'analyze': no handler for operation type 'repair'",
    ]
    with pytest.raises(InvalidInputError) as raised:
        check_templates([broken], {"fetch"}, {"report"})
    text = str(raised.value)
    assert text.startswith("4 template problem(s):")
    for problem in validate([broken], {"fetch"}, {"report"}):
        assert problem in text


def test_validate_finds_nothing_when_wiring_is_complete() -> None:
    calls: list[OperationContext] = []
    handlers = OperationRegistry({t: returning(calls) for t in ("fetch", "score", "repair")})
    template = _wired(
        checkpoints=[Checkpoint(after_stage="gather", label="data_ready")], next_workflow="hello"
    )
    assert validate([template], handlers, {"report", "hello"}) == []
    check_templates([template], handlers, {"report", "hello"})


def test_check_workflows_validates_compiled_templates_against_their_handlers() -> None:
    operations = OperationRegistry()
    stray = Checkpoint(after_stage="nowhere", label="look")
    registry = WorkflowRegistry(
        [compile_template(_wired(checkpoints=[stray], next_workflow="hello"), operations)]
    )
    with pytest.raises(InvalidInputError) as raised:
        check_workflows(registry)
    assert str(raised.value).splitlines() == [
        "5 template problem(s):",
        "  - template 'report', stage 'gather': no handler for operation type 'fetch'",
        "  - template 'report', stage 'analyze': no handler for operation type 'score'",
        "  - template 'report', stage 'analyze': no handler for operation type 'repair'",
        "  - template 'report': checkpoint 'look' follows unknown stage 'nowhere'",
        "  - template 'report': next_workflow 'hello' is not registered",
    ]
    calls: list[OperationContext] = []
    for operation_type in ("fetch", "score", "repair"):
        operations.register(operation_type, returning(calls))  # found when they run
    registry.register(Workflow("hello", {"run": _done}, "run"))
    with pytest.raises(InvalidInputError, match=r"^1 template problem"):
        check_workflows(registry)
    registry = WorkflowRegistry([compile_template(_wired(), operations)])
    check_workflows(registry)


def test_operation_registry_refuses_a_second_handler_for_a_type() -> None:
    calls: list[OperationContext] = []
    first, second = returning(calls), returning(calls)
    registry = OperationRegistry({"fetch": first})
    registry.register("fetch", first)  # the same handler again: a no-op
    with pytest.raises(InvalidInputError, match="another handler"):
        registry.register("fetch", second)
    assert list(registry) == ["fetch"]
    assert registry["fetch"] is first


def test_compiled_template_is_a_workflow_of_kind_template() -> None:
    template = _wired(queue="reports", retry=RetryPolicy(max_attempts=2))
    workflow = compile_template(template, OperationRegistry())
    assert isinstance(workflow, Workflow)
    assert workflow.kind == "template"
    assert workflow.stages == ["gather", "analyze"]
    assert set(workflow.handlers) == {"gather", "analyze"}
    assert workflow.initial == "gather"
    assert workflow.name == "report"
    assert workflow.queue_name == "reports"
    assert workflow.retry.max_attempts == 2
    assert templates_of([workflow, Workflow("plain", {"run": _done}, "run")]) == [template]


def test_template_params_must_be_an_object() -> None:
    workflow = compile_template(_wired(), OperationRegistry())
    assert workflow.validate_params(None) == {}
    assert workflow.validate_params({"a": 1}) == {"a": 1}
    with pytest.raises(InvalidInputError, match="must be a JSON object"):
        workflow.validate_params([1, 2])


def test_operation_results_are_built_by_completed_and_failed() -> None:
    done = completed({"rows": 3}, metadata={"ms": 5})
    assert done.is_completed
    assert done.data == {"rows": 3}
    assert done.metadata == {"ms": 5}
    assert completed().data == {}
    lost = failed("no network", {"host": "db"})
    assert not lost.is_completed
    assert (lost.reason, lost.metadata, lost.data) == ("no network", {"host": "db"}, {})
    with pytest.raises(TypeError):
        completed([1])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="operation status"):
        OperationResult(status="done")  # type: ignore[arg-type]


def _three_stages(**options: Any) -> Template:
    return Template(
        type="t",
        stages=[Stage(name=n, operations=[fast("x")]) for n in ("a", "b", "c")],
        **options,
    )


@pytest.mark.parametrize(
    ("checkpoints", "index", "context", "expected"),
    [
        ((), 0, {}, Next("b")),
        ((), 2, {}, Next("c")),  # the last stage is followed by its finish step
        ((Checkpoint(after_stage="a", label="look"),), 0, {}, Pause("look", "b")),
        ((Checkpoint(after_stage="a", label="look"),), 1, {}, Next("c")),
        ((Checkpoint(after_stage="c", label="approve"),), 2, {}, Pause("approve", "c")),
        (
            (
                Checkpoint(
                    after_stage="a", label="look", condition=lambda c: c.get("review") is True
                ),
            ),
            0,
            {"review": False},
            Next("b"),
        ),
        (
            (
                Checkpoint(
                    after_stage="a", label="first", condition=lambda c: c.get("review") is True
                ),
                Checkpoint(after_stage="a", label="second"),
            ),
            0,
            {"review": True},
            Pause("first", "b"),
        ),
    ],
)
def test_step_after_stage_decides_next_or_pause(
    checkpoints: tuple[Checkpoint, ...],
    index: int,
    context: dict[str, JSONValue],
    expected: Next | Pause,
) -> None:
    template = _three_stages(checkpoints=checkpoints)
    assert step_after_stage(template, index, context) == expected


def _record(position: int, status: str, data: JSONValue) -> OperationRecord:
    return OperationRecord(
        operation_id=operation_id_for(_ID, "s", position),
        instance_id=_ID,
        stage="s",
        position=position,
        type="x",
        status=status,
        attempts=1,
        error=None,
        data=data,
        metadata=None,
        started_at=None,
        finished_at=None,
    )


def test_merge_context_lets_later_data_win_and_ignores_failed_operations() -> None:
    records = [
        _record(0, "completed", {"a": 1, "b": 1}),
        _record(1, "failed", None),
        _record(2, "completed", {"b": 2}),
        _record(3, "skipped", None),
    ]
    base = {"a": 0, "keep": True}
    assert merge_context(base, records) == {"a": 1, "b": 2, "keep": True}
    assert base == {"a": 0, "keep": True}


@pytest.mark.parametrize(
    ("index", "stages", "settled", "operations", "expected"),
    [
        (0, 4, 0, 2, 0.0),
        (0, 4, 1, 2, 0.125),
        (1, 4, 2, 2, 0.5),
        (3, 4, 3, 3, 1.0),
        (0, 1, 5, 2, 1.0),
    ],
)
def test_stage_progress_counts_stages_and_operations_within_one(
    index: int, stages: int, settled: int, operations: int, expected: float
) -> None:
    assert stage_progress(index, stages, settled, operations) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("statuses", "fix_cycle", "expected"),
    [
        ([], 0, "analyze: 0 of 3 operations done"),
        (["completed", "completed"], 0, "analyze: 2 of 3 operations done"),
        (
            ["completed", "failed", "skipped"],
            0,
            "analyze: 1 of 3 operations done (1 failed, 1 skipped)",
        ),
        (["completed"], 2, "analyze: 1 of 3 operations done (fix cycle 2)"),
    ],
)
def test_stage_message_names_the_stage_and_counts(
    statuses: list[str], fix_cycle: int, expected: str
) -> None:
    assert stage_message("analyze", statuses, 3, fix_cycle) == expected


@pytest.mark.parametrize(("attempt", "delay_ms"), [(1, 100.0), (2, 200.0), (3, 400.0), (9, 5000.0)])
def test_operation_retry_delay_doubles_from_its_base_up_to_its_cap(
    attempt: int, delay_ms: float
) -> None:
    assert Operation(type="x").retry_delay_ms(attempt) == delay_ms


def test_child_params_are_the_final_context_overlaid_with_next_params() -> None:
    context = {"name": "q3", "pages": 4}
    assert child_params(_one_stage(next_workflow="hello"), context) == context
    overlaid = _one_stage(next_workflow="hello", next_params={"name": "report"})
    assert child_params(overlaid, context) == {"name": "report", "pages": 4}


def test_operation_id_is_stable_per_slot() -> None:
    assert operation_id_for(_ID, "s", 0) == operation_id_for(_ID, "s", 0)
    assert len({operation_id_for(_ID, s, p) for s in ("s", "t") for p in (0, 1)}) == 4


@given(
    instance=st.uuids(),
    stage=st.text(max_size=80),
    position=st.integers(min_value=0, max_value=10**6),
)
def test_operation_id_is_the_uuid5_of_its_slot(instance: UUID, stage: str, position: int) -> None:
    # The id handlers use as an idempotency key, and rows already written carry: it must stay
    # uuid5(instance id, "stage/position") whichever way it is computed.
    expected = uuid.uuid5(instance, f"{stage}/{position}")
    found = operation_id_for(instance, stage, position)
    assert (found, str(found), hash(found), found.version) == (
        expected,
        str(expected),
        hash(expected),
        5,
    )
    assert found.is_safe == expected.is_safe


# -- running on PostgreSQL ----------------------------------------------------------------------


async def test_stages_run_in_order_and_merge_operation_data_into_the_context(store: Store) -> None:
    calls: list[OperationContext] = []

    async def count(ctx: OperationContext) -> OperationResult:
        calls.append(ctx)
        rows = ctx.context["rows"]
        assert isinstance(rows, int)
        return completed({"count": rows * 2})

    operations = OperationRegistry(
        {
            "fetch": returning(calls, {"rows": 3}),
            "count": count,
            "summarize": returning(calls, {"summary": "ok"}),
        }
    )
    template = Template(
        type="pipeline",
        stages=[
            Stage(name="gather", operations=[fast("fetch"), fast("count")]),
            Stage(name="report", operations=[fast("summarize", max_attempts=2)]),
        ],
    )
    engine = make_engine(store, compile_template(template, operations))
    enqueued = await engine.enqueue("pipeline", {"topic": "sales"})
    assert await engine.tick() == 1
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED
    final = {"topic": "sales", "rows": 3, "count": 6, "summary": "ok"}
    assert done.result == {"context": final}
    assert [c.operation_type for c in calls] == ["fetch", "count", "summarize"]
    summarize = calls[2]
    assert summarize.context == {"topic": "sales", "rows": 3, "count": 6}
    assert summarize.initial_context == {"topic": "sales"}
    assert summarize.instance_id == enqueued.instance_id
    assert summarize.operation_id == operation_id_for(enqueued.instance_id, "report", 0)
    assert (summarize.stage, summarize.workflow_type) == ("report", "pipeline")
    assert (summarize.attempt, summarize.max_attempts) == (1, 2)
    rows = by_slot(await engine.operations(enqueued.instance_id))
    assert sorted(rows) == [("gather", 0), ("gather", 1), ("report", 0)]
    assert all(r.status == "completed" and r.attempts == 1 for r in rows.values())
    assert rows["gather", 1].data == {"count": 6}
    assert rows["report", 0].operation_id == summarize.operation_id
    assert all(r.started_at is not None and r.finished_at is not None for r in rows.values())
    assert await types_of(store, enqueued.instance_id) == [
        EventType.ENQUEUED,
        EventType.STARTED,
        EventType.CHECKPOINT,  # after gather
        EventType.COMPLETED,  # the last stage, report, finishes in its own step
    ]


async def test_operation_outcomes_keep_every_character_and_value_they_carry(store: Store) -> None:
    # The group commit sends outcomes as one JSON text of its own formatting: quotes,
    # backslashes, line separators, characters past the BMP, big and exponent numbers and a
    # text a column cannot hold (NUL, a lone surrogate) must come back as written or stored.
    data: dict[str, JSONValue] = {
        "text": 'a "quoted" \\ back\nslash \u2028 \u00e9 \U0001f600',
        "numbers": [9007199254740993, -0.0, 1.5e-300, 12345678901234567890],
        "nested": {"": None, "t": True},
    }

    async def carry(ctx: OperationContext) -> OperationResult:
        return completed(data, metadata={"m": ["\U0001f600", 2]})

    async def refuse(ctx: OperationContext) -> OperationResult:
        return failed('no "luck" \\ \x00 \udc80 \U0001f600', metadata=[1, "x"])

    operations = OperationRegistry({"carry": carry, "refuse": refuse})
    stage = Stage(
        name="only",
        parallel=True,
        operations=[fast("carry"), fast("refuse", critical=False)],
    )
    engine = make_engine(store, compile_template(Template(type="odd", stages=[stage]), operations))
    enqueued = await engine.enqueue("odd")
    assert await engine.tick() == 1
    rows = by_slot(await engine.operations(enqueued.instance_id))
    carried, refused = rows["only", 0], rows["only", 1]
    assert (carried.status, carried.data, carried.error) == ("completed", data, None)
    assert refused.status == "failed"
    assert refused.error == 'no "luck" \\ \ufffd \ufffd \U0001f600'
    for row in (carried, refused):
        assert row.started_at is not None
        assert row.finished_at is not None
        assert timedelta(0) <= row.finished_at - row.started_at < timedelta(minutes=1)
    assert (carried.metadata, refused.metadata) == ({"m": ["\U0001f600", 2]}, [1, "x"])


async def test_the_next_operation_sees_data_as_a_resumed_run_would(store: Store) -> None:
    # A kit audit: within one run, an operation's data reached the next operation's context as
    # returned (a tuple, a float 1e20), while a run resumed after a crash reads it back from
    # the database ([1, 2], the int 10**20): the same template behaved two ways.
    seen: list[dict[str, JSONValue]] = []

    async def make(ctx: OperationContext) -> OperationResult:
        pair: Any = (1, 2)  # not a JSON type: what the database gives back is a list
        return completed({"pair": pair, "big": 1e20})

    async def read(ctx: OperationContext) -> OperationResult:
        seen.append(dict(ctx.context))
        return completed()

    operations = OperationRegistry({"make": make, "read": read})
    stage = Stage(name="only", operations=[fast("make"), fast("read")])
    engine = make_engine(store, compile_template(Template(type="kept", stages=[stage]), operations))
    enqueued = await engine.enqueue("kept")
    assert await engine.tick() == 1
    assert seen == [{"pair": [1, 2], "big": 10**20}]
    assert type(seen[0]["big"]) is int
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.result == {"context": {"big": 10**20, "pair": [1, 2]}}


async def test_progress_and_stage_are_visible_after_each_stage_checkpoint(store: Store) -> None:
    seen: dict[str, tuple[str | None, float | None, str | None]] = {}

    async def probe(ctx: OperationContext) -> OperationResult:
        record = await store.get_instance(ctx.instance_id)
        assert record is not None
        seen[ctx.stage] = (record.stage, record.progress, record.message)
        return completed()

    calls: list[OperationContext] = []
    operations = OperationRegistry({"probe": probe, "work": returning(calls)})
    template = Template(
        type="staged",
        stages=[
            Stage(name="first", operations=[fast("work"), fast("work")]),
            Stage(name="second", operations=[fast("probe"), fast("work")]),
            Stage(name="third", operations=[fast("probe")]),
            Stage(name="fourth", operations=[fast("probe")]),
        ],
    )
    engine = make_engine(store, compile_template(template, operations))
    enqueued = await engine.enqueue("staged")
    await engine.tick()
    assert seen == {
        "second": ("first", 0.25, "first: 2 of 2 operations done"),
        "third": ("second", 0.5, "second: 2 of 2 operations done"),
        "fourth": ("third", 0.75, "third: 1 of 1 operations done"),
    }
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert (done.status, done.stage, done.progress) == (Status.COMPLETED, "fourth", 1.0)
    assert done.message == "fourth: 1 of 1 operations done"
    events = await store.instance_events_after(enqueued.instance_id, 0, 100)
    # The last stage finishes the instance in its own step: its report is the completion's.
    assert [(e.type, e.stage) for e in events if e.stage is not None] == [
        (EventType.CHECKPOINT, "first"),
        (EventType.CHECKPOINT, "second"),
        (EventType.CHECKPOINT, "third"),
        (EventType.COMPLETED, "fourth"),
    ]


async def test_parallel_operations_run_at_once_and_merge_in_position_order(store: Store) -> None:
    started: list[str] = []
    all_started = asyncio.Event()
    others_done = asyncio.Event()
    finished: list[str] = []

    def worker(name: str) -> OperationHandler:
        async def handle(ctx: OperationContext) -> OperationResult:
            started.append(name)
            if len(started) == 3:
                all_started.set()
            await all_started.wait()  # a sequential stage would never get past this
            if name == "first":
                await others_done.wait()  # finishes last, yet its data merges first
            finished.append(name)
            if len(finished) == 2:
                others_done.set()
            return completed({"winner": name, name: ctx.context["seed"]})

        return handle

    operations = OperationRegistry({n: worker(n) for n in ("first", "second", "third")})
    template = Template(
        type="fan_out",
        stages=[
            Stage(
                name="analyze",
                parallel=True,
                operations=[fast(n, timeout_seconds=10) for n in ("first", "second", "third")],
            )
        ],
        retry=NO_RETRY,
    )
    engine = make_engine(store, compile_template(template, operations))
    enqueued = await engine.enqueue("fan_out", {"seed": 7})
    await engine.tick()
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED, done.last_error
    assert finished[-1] == "first"
    assert done.result == {
        "context": {"seed": 7, "winner": "third", "first": 7, "second": 7, "third": 7}
    }
    assert done.message == "analyze: 3 of 3 operations done"


MARKER: contextvars.ContextVar[str | None] = contextvars.ContextVar("marker", default=None)


async def test_parallel_operations_that_never_wait_run_apart_as_tasks_would(store: Store) -> None:
    # An operation that finishes without waiting runs at once, with no task of its own; it
    # still gets a context of its own, as a task would, and a sibling that waits goes on.
    seen: dict[str, str | None] = {}
    release = asyncio.Event()

    def worker(name: str) -> OperationHandler:
        async def handle(ctx: OperationContext) -> OperationResult:
            seen[name] = MARKER.get()
            MARKER.set(name)
            if name == "waits":
                await release.wait()  # set by "frees", which starts after this one waits
                seen["waits after"] = MARKER.get()
            if name == "frees":
                release.set()
            if name == "later":
                return completed({"later": True})
            return completed({"winner": name, name: True})

        return handle

    names = ("first", "waits", "frees")
    template = Template(
        type="eager_fan_out",
        stages=[
            Stage(name="fan", parallel=True, operations=[fast(n) for n in names]),
            Stage(name="after", operations=[fast("later")]),
        ],
        retry=NO_RETRY,
    )
    operations = OperationRegistry({n: worker(n) for n in (*names, "later")})
    engine = make_engine(store, compile_template(template, operations))
    enqueued = await engine.enqueue("eager_fan_out", {})
    await engine.tick()
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED, done.last_error
    # None saw another's value: not a sibling's, nor, in the next stage, the fan's.
    assert seen == {
        "first": None,
        "waits": None,
        "frees": None,
        "waits after": "waits",
        "later": None,
    }
    assert done.result == {
        "context": {"winner": "frees", "first": True, "waits": True, "frees": True, "later": True}
    }
    rows = await engine.operations(enqueued.instance_id)
    assert sorted((r.stage, r.position, r.status) for r in rows) == [
        ("after", 0, "completed"),
        ("fan", 0, "completed"),
        ("fan", 1, "completed"),
        ("fan", 2, "completed"),
    ]


async def test_parallel_operations_keep_their_time_limits_and_task_state_to_themselves(
    store: Store,
) -> None:
    # Each operation's limits bind to the task that runs it: its own time limit stops it
    # alone (not the stage), and a handler's asyncio.timeout or anyio cancel scope (httpx
    # uses one per request) is entered and left in one task.
    async def slow(ctx: OperationContext) -> OperationResult:
        await asyncio.sleep(30)
        return completed()

    async def own_timeout(ctx: OperationContext) -> OperationResult:
        try:
            async with asyncio.timeout(0.05):
                await asyncio.sleep(30)
        except TimeoutError:
            return completed({"own_timeout": "caught"})
        return completed()

    async def scoped(ctx: OperationContext) -> OperationResult:
        with anyio.fail_after(10):
            await asyncio.sleep(0.01)
        return completed({ctx.operation_type: True})

    handlers = {"slow": slow, "own_timeout": own_timeout, "scoped_a": scoped, "scoped_b": scoped}
    template = Template(
        type="limited_fan_out",
        stages=[
            Stage(
                name="fan",
                parallel=True,
                operations=[
                    fast("slow", timeout_seconds=0.1, critical=False, max_attempts=1),
                    fast("own_timeout"),
                    fast("scoped_a"),
                    fast("scoped_b"),
                ],
            )
        ],
        retry=NO_RETRY,
    )
    engine = make_engine(store, compile_template(template, OperationRegistry(handlers)))
    enqueued = await engine.enqueue("limited_fan_out", {})
    await engine.tick()
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED, done.last_error
    assert done.result == {"context": {"own_timeout": "caught", "scoped_a": True, "scoped_b": True}}
    rows = by_slot(await engine.operations(enqueued.instance_id))
    assert [(rows["fan", p].status, rows["fan", p].error) for p in range(4)] == [
        ("failed", "timed out after 0.1s"),
        ("completed", None),
        ("completed", None),
        ("completed", None),
    ]


async def test_failed_attempts_are_retried_inside_the_stage(store: Store) -> None:
    calls: list[OperationContext] = []

    async def flaky(ctx: OperationContext) -> OperationResult:
        calls.append(ctx)
        if ctx.attempt < 3:
            raise ConnectionError(f"refused on attempt {ctx.attempt}")
        return completed({"fetched": True})

    template = Template(
        type="retrying",
        stages=[Stage(name="load", operations=[Operation(type="flaky", retry_base_ms=1)])],
    )
    engine = make_engine(store, compile_template(template, OperationRegistry({"flaky": flaky})))
    enqueued = await engine.enqueue("retrying")
    await engine.tick()
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED
    assert done.attempts == 1  # the instance itself never retried
    assert [(c.attempt, c.max_attempts) for c in calls] == [(1, 3), (2, 3), (3, 3)]
    assert len({c.operation_id for c in calls}) == 1
    [row] = await engine.operations(enqueued.instance_id)
    assert (row.status, row.attempts, row.error, row.data) == (
        "completed",
        3,
        None,
        {"fetched": True},
    )


async def test_non_critical_failures_are_recorded_and_the_stage_goes_on(store: Store) -> None:
    never = asyncio.Event()
    calls: list[OperationContext] = []

    async def hangs(ctx: OperationContext) -> OperationResult:
        await never.wait()
        return completed()

    async def refuses(ctx: OperationContext) -> OperationResult:
        return failed("quota exceeded", {"limit": 10})

    async def malformed(ctx: OperationContext) -> OperationResult:
        return "fine"  # type: ignore[return-value]

    operations = OperationRegistry(
        {"hangs": hangs, "refuses": refuses, "malformed": malformed, "ok": returning(calls)}
    )
    optional = {"critical": False, "max_attempts": 1}
    template = Template(
        type="tolerant",
        stages=[
            Stage(
                name="enrich",
                operations=[
                    fast("hangs", timeout_seconds=0.05, **optional),
                    fast("refuses", **optional),
                    fast("malformed", **optional),
                    fast("unregistered", **optional),
                    fast("ok"),
                ],
            )
        ],
        retry=NO_RETRY,
    )
    engine = make_engine(store, compile_template(template, operations))
    enqueued = await engine.enqueue("tolerant")
    await engine.tick()
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED
    assert done.message == "enrich: 1 of 5 operations done (4 failed)"
    rows = by_slot(await engine.operations(enqueued.instance_id))
    assert [(rows["enrich", p].status, rows["enrich", p].error) for p in range(5)] == [
        ("failed", "timed out after 0.05s"),
        ("failed", "quota exceeded"),
        ("failed", "handler returned str; expected completed(...) or failed(...)"),
        ("failed", "no handler registered for operation type 'unregistered'"),
        ("completed", None),
    ]
    assert rows["enrich", 1].metadata == {"limit": 10}
    assert rows["enrich", 3].attempts == 0


async def test_an_outcome_that_is_not_json_fails_its_attempt_and_is_retried(
    store: Store,
) -> None:
    calls: list[OperationContext] = []

    async def sloppy(ctx: OperationContext) -> OperationResult:
        calls.append(ctx)
        if ctx.attempt == 1:
            return completed({"when": {1, 2}})
        if ctx.attempt == 2:
            return completed({"n": float("nan")})
        return completed({"n": 1}, metadata={"attempt": ctx.attempt})

    async def bad_metadata(ctx: OperationContext) -> OperationResult:
        return failed("refused", metadata={"bytes": b"\x00"})

    template = Template(
        type="sloppy",
        stages=[
            Stage(
                name="s",
                operations=[
                    fast("sloppy"),
                    fast("bad_metadata", critical=False, max_attempts=1),
                ],
            )
        ],
        retry=NO_RETRY,
    )
    operations = OperationRegistry({"sloppy": sloppy, "bad_metadata": bad_metadata})
    engine = make_engine(store, compile_template(template, operations))
    enqueued = await engine.enqueue("sloppy")
    await engine.tick()
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED
    assert [c.attempt for c in calls] == [1, 2, 3]
    rows = by_slot(await engine.operations(enqueued.instance_id))
    first = rows["s", 0]
    assert (first.status, first.attempts, first.data, first.metadata) == (
        "completed",
        3,
        {"n": 1},
        {"attempt": 3},
    )
    second = rows["s", 1]
    assert second.status == "failed"
    assert second.error is not None
    assert second.error.startswith("operation metadata must be JSON")
    assert (second.data, second.metadata) == (None, None)
    assert done.result == {"context": {"n": 1}}


async def test_critical_failure_fails_the_instance_and_later_stages_never_run(
    store: Store,
) -> None:
    calls: list[OperationContext] = []

    async def write(ctx: OperationContext) -> OperationResult:
        calls.append(ctx)
        raise OSError("disk full")

    operations = OperationRegistry({"write": write, "after": returning(calls)})
    template = Template(
        type="fragile",
        stages=[
            Stage(name="load", operations=[fast("write", max_attempts=2), fast("after")]),
            Stage(name="publish", operations=[fast("after")]),
        ],
    )
    assert template.retry.max_attempts == 3  # instance attempts cover lost workers only
    engine = make_engine(store, compile_template(template, operations))
    enqueued = await engine.enqueue("fragile")
    await engine.tick()
    failed_instance = await engine.get(enqueued.instance_id)
    assert failed_instance is not None
    assert failed_instance.status == Status.FAILED
    assert failed_instance.attempts == 1  # final at once: the operation already retried
    assert failed_instance.last_error == (  # the operation's exception's type (failures.py)
        "OSError: stage 'load': operation 'write' (#0) failed after 2 attempt(s): disk full"
    )
    assert counts(calls) == {"write": 2}  # the sequence stops at a critical failure
    [row] = await engine.operations(enqueued.instance_id)
    assert (row.stage, row.status, row.attempts, row.error) == ("load", "failed", 2, "disk full")
    assert (await types_of(store, enqueued.instance_id))[-1] == EventType.FAILED


async def test_conditions_skip_stages_and_operations_with_skipped_rows(store: Store) -> None:
    calls: list[OperationContext] = []
    operations = OperationRegistry({t: returning(calls) for t in ("a", "b", "c", "d")})
    template = Template(
        type="conditional",
        stages=[
            Stage(
                name="optional",
                condition=lambda c: bool(c.get("deep")),
                operations=[fast("a"), fast("b")],
            ),
            Stage(
                name="main",
                operations=[fast("c", condition=lambda c: c.get("mode") == "full"), fast("d")],
            ),
        ],
    )
    engine = make_engine(store, compile_template(template, operations))
    enqueued = await engine.enqueue("conditional", {"deep": False, "mode": "quick"})
    await engine.tick()
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED
    assert counts(calls) == {"d": 1}
    rows = by_slot(await engine.operations(enqueued.instance_id))
    assert {slot: r.status for slot, r in rows.items()} == {
        ("optional", 0): "skipped",
        ("optional", 1): "skipped",
        ("main", 0): "skipped",
        ("main", 1): "completed",
    }
    assert rows["optional", 0].metadata == {"reason": "stage condition is false"}
    assert rows["main", 0].metadata == {"reason": "operation condition is false"}


@pytest.mark.parametrize(("review", "pauses"), [(True, True), (False, False)])
async def test_a_checkpoint_after_a_skipped_stage_pauses_when_its_own_condition_holds(
    store: Store, review: bool, pauses: bool
) -> None:
    # A review gate is never passed silently: whether its stage ran or its condition skipped
    # it, the checkpoint pauses when its own condition holds (and only then).
    calls: list[OperationContext] = []
    operations = OperationRegistry({t: returning(calls) for t in ("enrich", "publish")})
    template = Template(
        type="gated",
        stages=[
            Stage(
                name="enrich",
                condition=lambda c: bool(c.get("deep")),
                operations=[fast("enrich")],
            ),
            Stage(name="publish", operations=[fast("publish")]),
        ],
        checkpoints=[
            Checkpoint(
                after_stage="enrich", label="approve", condition=lambda c: c.get("review") is True
            )
        ],
    )
    engine = make_engine(store, compile_template(template, operations))
    enqueued = await engine.enqueue("gated", {"deep": False, "review": review})
    await engine.tick()
    record = await engine.get(enqueued.instance_id)
    assert record is not None
    if pauses:
        assert (record.status, record.checkpoint) == (Status.PAUSED, "approve")
        assert (record.stage, record.message) == ("enrich", "enrich: skipped (condition is false)")
        assert counts(calls) == {}  # nothing published before the approval
        await engine.resume(enqueued.instance_id)
        await engine.tick()
        record = await engine.get(enqueued.instance_id)
        assert record is not None
    assert record.status == Status.COMPLETED
    assert counts(calls) == {"publish": 1}
    assert (EventType.PAUSED in await types_of(store, enqueued.instance_id)) is pauses


def _fix_verify(max_fix_cycles: int) -> Template:
    return Template(
        type="self_healing",
        stages=[
            Stage(
                name="test",
                operations=[fast("check", max_attempts=1), fast("lint")],
                fix_operations=[fast("repair")],
                max_fix_cycles=max_fix_cycles,
            )
        ],
        retry=NO_RETRY,
    )


async def test_fix_operations_run_and_the_stage_verifies_again(store: Store) -> None:
    calls: list[OperationContext] = []

    async def check(ctx: OperationContext) -> OperationResult:
        calls.append(ctx)
        return completed({"green": True}) if ctx.context.get("repaired") else failed("red")

    async def repair(ctx: OperationContext) -> OperationResult:
        calls.append(ctx)
        return completed({"repaired": True})

    operations = OperationRegistry({"check": check, "repair": repair, "lint": returning(calls)})
    engine = make_engine(store, compile_template(_fix_verify(max_fix_cycles=2), operations))
    enqueued = await engine.enqueue("self_healing")
    await engine.tick()
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED, done.last_error
    # check fails, so lint never runs; repair; then both verify again.
    assert [c.operation_type for c in calls] == ["check", "repair", "check", "lint"]
    assert done.result == {"context": {"repaired": True, "green": True}}
    rows = by_slot(await engine.operations(enqueued.instance_id))
    assert {slot: r.status for slot, r in rows.items()} == {
        ("test", 0): "completed",
        ("test", 1): "completed",
        ("test", FIX_POSITION_BASE): "completed",
    }
    assert done.message == "test: 2 of 2 operations done (fix cycle 1)"


async def test_fix_cycles_run_out_and_the_instance_fails(store: Store) -> None:
    calls: list[OperationContext] = []

    async def check(ctx: OperationContext) -> OperationResult:
        calls.append(ctx)
        return failed("still red")

    operations = OperationRegistry(
        {"check": check, "repair": returning(calls), "lint": returning(calls)}
    )
    engine = make_engine(store, compile_template(_fix_verify(max_fix_cycles=2), operations))
    enqueued = await engine.enqueue("self_healing")
    await engine.tick()
    record = await engine.get(enqueued.instance_id)
    assert record is not None
    assert record.status == Status.FAILED
    assert record.last_error == (
        "StageFailedError: "
        "stage 'test': operation 'check' (#0) failed after 1 attempt(s) and 2 fix cycle(s): "
        "still red"
    )
    assert counts(calls) == {"check": 3, "repair": 2}


def _reviewed(operations: OperationRegistry) -> TemplateWorkflow:
    template = Template(
        type="report",
        queue="reviews",
        stages=[
            Stage(name="gather", operations=[fast("gather")]),
            Stage(name="analyze", parallel=True, operations=[fast("score"), fast("rank")]),
        ],
        checkpoints=[
            Checkpoint(
                after_stage="gather",
                label="data_ready",
                condition=lambda c: c.get("review") is True,
            )
        ],
    )
    return compile_template(template, operations)


async def test_checkpoint_pauses_without_lease_or_slot_until_resumed(store: Store) -> None:
    calls: list[OperationContext] = []
    operations = OperationRegistry(
        {
            "gather": returning(calls, {"data": [1, 2]}),
            "score": returning(calls, {"score": 9}),
            "rank": returning(calls, {"rank": 1}),
        }
    )
    quick = Workflow("quick", handlers={"run": _done}, initial="run", queue="reviews")
    engine = make_engine(store, _reviewed(operations), quick)
    await engine.configure_queue("reviews", concurrency=1)
    enqueued = await engine.enqueue("report", {"review": True})
    assert await engine.tick() == 1
    paused = await engine.get(enqueued.instance_id)
    assert paused is not None
    assert (paused.status, paused.checkpoint) == (Status.PAUSED, "data_ready")
    assert (paused.owner_id, paused.lease_expires_at) == (None, None)
    assert (paused.stage, paused.progress) == ("gather", 0.5)
    assert paused.message == "gather: 1 of 1 operations done"
    events = await store.instance_events_after(enqueued.instance_id, 0, 100)
    assert (events[-1].type, events[-1].checkpoint) == (EventType.PAUSED, "data_ready")
    # The paused instance holds no slot: another instance of its queue (concurrency 1) runs.
    other = await engine.enqueue("quick")
    assert await engine.tick() == 1
    other_done = await engine.get(other.instance_id)
    assert other_done is not None
    assert other_done.status == Status.COMPLETED
    with pytest.raises(ConflictError):
        await engine.resume(other.instance_id)
    outcomes = await asyncio.gather(
        engine.resume(enqueued.instance_id),
        engine.resume(enqueued.instance_id),
        return_exceptions=True,
    )
    assert sorted(type(o).__name__ for o in outcomes) == ["ConflictError", "InstanceRecord"]
    assert await engine.tick() == 1
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED
    assert done.checkpoint is None
    assert done.result == {"context": {"review": True, "data": [1, 2], "score": 9, "rank": 1}}
    assert counts(calls) == {"gather": 1, "score": 1, "rank": 1}
    types = await types_of(store, enqueued.instance_id)
    assert types.count(EventType.RESUMED) == 1
    assert types[types.index(EventType.PAUSED) + 1] == EventType.RESUMED


async def test_checkpoint_is_passed_when_its_condition_is_false(store: Store) -> None:
    calls: list[OperationContext] = []
    operations = OperationRegistry({t: returning(calls) for t in ("gather", "score", "rank")})
    engine = make_engine(store, _reviewed(operations))
    enqueued = await engine.enqueue("report", {"review": False})
    await engine.tick()
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED
    assert EventType.PAUSED not in await types_of(store, enqueued.instance_id)


async def test_retry_reruns_the_failed_stage_keeping_completed_operations(store: Store) -> None:
    calls: list[OperationContext] = []
    broken = True

    async def flaky(ctx: OperationContext) -> OperationResult:
        calls.append(ctx)
        return failed("upstream down") if broken else completed({"flaky": "ok"})

    operations = OperationRegistry(
        {
            "prepare": returning(calls, {"prepared": True}),
            "good": returning(calls, {"good": "ok"}),
            "flaky": flaky,
        }
    )
    template = Template(
        type="resumable",
        stages=[
            Stage(name="prepare", operations=[fast("prepare")]),
            Stage(
                name="work",
                parallel=True,
                operations=[fast("good"), fast("flaky", max_attempts=1)],
            ),
        ],
        retry=NO_RETRY,
    )
    engine = make_engine(store, compile_template(template, operations))
    enqueued = await engine.enqueue("resumable")
    await engine.tick()
    first = await engine.get(enqueued.instance_id)
    assert first is not None
    assert first.status == Status.FAILED
    assert first.last_error is not None
    assert "'flaky' (#1) failed after 1 attempt(s): upstream down" in first.last_error
    before = by_slot(await engine.operations(enqueued.instance_id))
    assert before["work", 1].status == "failed"
    with pytest.raises(ConflictError):
        await engine.resume(enqueued.instance_id)
    broken = False
    await engine.retry(enqueued.instance_id)
    await engine.tick()
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED
    assert counts(calls) == {"prepare": 1, "good": 1, "flaky": 2}
    after = by_slot(await engine.operations(enqueued.instance_id))
    assert after["work", 0] == before["work", 0]  # untouched
    assert after["prepare", 0] == before["prepare", 0]
    assert after["work", 1].operation_id == before["work", 1].operation_id
    assert (after["work", 1].status, after["work", 1].error) == ("completed", None)
    assert done.result == {"context": {"prepared": True, "good": "ok", "flaky": "ok"}}
    with pytest.raises(ConflictError):
        await engine.retry(enqueued.instance_id)


async def test_next_workflow_is_enqueued_as_a_child_with_the_final_context(store: Store) -> None:
    async def greet(ctx: HandlerContext, params: JSONValue) -> Done:
        return Done({"params": params})

    child_workflow = Workflow("greet", handlers={"run": greet}, initial="run")
    calls: list[OperationContext] = []
    operations = OperationRegistry({"write": returning(calls, {"pages": 4})})
    template = Template(
        type="chained",
        stages=[Stage(name="write", operations=[fast("write")])],
        checkpoints=[Checkpoint(after_stage="write", label="approve")],
        next_workflow="greet",
    )
    engine = make_engine(store, compile_template(template, operations), child_workflow)
    enqueued = await engine.enqueue("chained", {"topic": "q3"})
    await engine.tick()
    paused = await engine.get(enqueued.instance_id)
    assert paused is not None
    assert (paused.status, paused.checkpoint) == (Status.PAUSED, "approve")  # after the last stage
    assert await engine.list_instances() == [paused]  # no child before the approval
    await engine.resume(enqueued.instance_id)
    await engine.tick()
    parent = await engine.get(enqueued.instance_id)
    assert parent is not None
    assert parent.status == Status.COMPLETED
    assert isinstance(parent.result, dict)
    final = {"topic": "q3", "pages": 4}
    assert parent.result["context"] == final
    child_id = parent.result["next_instance_id"]
    [child] = [r for r in await engine.list_instances() if r.name == "greet"]
    assert str(child.instance_id) == child_id
    assert child.parent_id == enqueued.instance_id
    assert child.params == final
    assert counts(calls) == {"write": 1}
    await engine.tick()
    child_done = await engine.get(child.instance_id)
    assert child_done is not None
    assert child_done.result == {"params": final}


async def test_crash_mid_parallel_stage_reruns_only_unfinished_operations(
    store: Store, database_url: str
) -> None:
    gate, entered = asyncio.Event(), asyncio.Event()
    first_calls: list[OperationContext] = []

    async def blocks(ctx: OperationContext) -> OperationResult:
        first_calls.append(ctx)
        entered.set()
        await gate.wait()
        return completed({"third": "first engine"})

    template = Template(
        type="crashy",
        stages=[
            Stage(
                name="analyze",
                parallel=True,
                operations=[fast("one"), fast("two"), fast("three", timeout_seconds=30)],
            )
        ],
    )
    first_operations = OperationRegistry(
        {"one": returning(first_calls, {"one": 1}), "two": returning(first_calls, {"two": 2})}
    )
    first_operations.register("three", blocks)
    first = make_engine(store, compile_template(template, first_operations), owner_id="first")
    enqueued = await first.enqueue("crashy")
    first_tick = asyncio.create_task(first.tick())
    await asyncio.wait_for(entered.wait(), timeout=10)
    recorded = await eventually(
        lambda: first.operations(enqueued.instance_id), lambda rows: len(rows) == 2
    )
    async with store.connection() as conn:  # the first worker "dies": its lease runs out
        await conn.execute(
            "UPDATE laneway.instances SET lease_expires_at = now() - interval '1 second'"
        )
    second_calls: list[OperationContext] = []
    second_operations = OperationRegistry(
        {
            "one": returning(second_calls, {"one": "again"}),
            "two": returning(second_calls, {"two": "again"}),
            "three": returning(second_calls, {"third": "second engine"}),
        }
    )
    async with open_store(database_url) as other_store:
        second = make_engine(
            other_store, compile_template(template, second_operations), owner_id="second"
        )
        assert await second.tick() == 1  # recovers the expired lease, claims, completes
    gate.set()
    await asyncio.wait_for(first_tick, timeout=10)
    assert counts(first_calls) == {"one": 1, "two": 1, "three": 1}
    assert counts(second_calls) == {"three": 1}
    done = await first.get(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED
    assert done.result == {"context": {"one": 1, "two": 2, "third": "second engine"}}
    rows = by_slot(await first.operations(enqueued.instance_id))
    assert [rows["analyze", r.position] for r in recorded] == recorded  # untouched
    assert rows["analyze", 2].data == {"third": "second engine"}  # the late write was fenced
    types = await types_of(store, enqueued.instance_id)
    assert (types.count(EventType.RETRYING), types.count(EventType.COMPLETED)) == (1, 1)


async def test_cancel_stops_a_running_operation_and_signals_it(store: Store) -> None:
    entered, stopped = asyncio.Event(), asyncio.Event()
    seen: list[OperationContext] = []

    async def waits(ctx: OperationContext) -> OperationResult:
        seen.append(ctx)
        entered.set()
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()
        return completed()

    template = Template(
        type="cancellable",
        stages=[Stage(name="wait", parallel=True, operations=[fast("waits", timeout_seconds=30)])],
    )
    engine = make_engine(
        store,
        compile_template(template, OperationRegistry({"waits": waits})),
        poll_interval_seconds=0.05,
    )
    async with engine.running():
        enqueued = await engine.enqueue("cancellable")
        await asyncio.wait_for(entered.wait(), timeout=10)
        cancelled = await engine.cancel(enqueued.instance_id)
        await asyncio.wait_for(stopped.wait(), timeout=10)
    assert cancelled.status == Status.CANCELLED
    assert seen[0].cancelled.is_set()
    assert await engine.operations(enqueued.instance_id) == []


async def _done(ctx: HandlerContext, params: JSONValue) -> Done:
    return Done()
