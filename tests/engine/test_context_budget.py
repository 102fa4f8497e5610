"""A template's context is capped (context_budget.py): the write that would take it past the
cap is refused where it is made, an operation's data or a resume's input, with a message that
names the cause, and the instance fails at once instead of at completion after retries.

The budget's arithmetic is tested without I/O; the rest on PostgreSQL through the Engine.
"""

from typing import Any

import pytest

from laneway.engine import RetryPolicy
from laneway.engine.context_budget import (
    ContextBudget,
    ContextTooLargeError,
    context_cap,
    encoded_size,
    input_room,
)
from laneway.engine.payloads import MAX_PAYLOAD_BYTES, encode_json
from laneway.engine.template_interpreter import (
    Checkpoint,
    Operation,
    OperationContext,
    OperationRegistry,
    OperationResult,
    Stage,
    Template,
    compile_template,
    completed,
)
from laneway.errors import InvalidInputError
from laneway.model import JSONValue, Status
from laneway.store import Store
from tests.engine.helpers import make_engine

KIB = 1024


def _template(**options: Any) -> Template:
    return Template(type="t", stages=[Stage(name="s", operations=[Operation(type="x")])], **options)


def _size(data: dict[str, JSONValue]) -> int:
    return len(encode_json(data, what="data"))


# -- the budget (pure) --------------------------------------------------------------------------


def test_the_cap_leaves_room_for_the_result_and_the_next_workflows_params() -> None:
    assert context_cap(_template()) == MAX_PAYLOAD_BYTES - len('{"context":}')
    result = {"context": {}, "next_instance_id": "00000000-0000-0000-0000-000000000000"}
    assert context_cap(_template(next_workflow="child")) == MAX_PAYLOAD_BYTES - (_size(result) - 2)
    overlay: dict[str, JSONValue] = {"note": "n" * 1000}
    chained = _template(next_workflow="child", next_params=overlay)
    assert context_cap(chained) == MAX_PAYLOAD_BYTES - _size(overlay)


def test_data_within_the_cap_is_counted_without_encoding_the_context_again() -> None:
    budget = ContextBudget(cap=100)
    context: dict[str, JSONValue] = {"a": "1"}  # 9 bytes
    assert budget.refuses(context, {}, 2) is None  # nothing to add
    data: dict[str, JSONValue] = {"b": "x" * 10}
    assert budget.refuses(context, data, _size(data)) is None
    bigger: dict[str, JSONValue] = {"c": "y" * 60}
    # The bound (9 + 18 + 68) is under the cap: accepted on the count alone.
    assert budget.refuses({**context, **data}, bigger, _size(bigger)) is None
    too_much: dict[str, JSONValue] = {"d": "z" * 20}
    merged = {**context, **data, **bigger, **too_much}
    assert budget.refuses({**context, **data, **bigger}, too_much, _size(too_much)) == (
        encoded_size(merged)
    )


def test_data_that_replaces_a_key_is_measured_when_the_count_passes_the_cap() -> None:
    budget = ContextBudget(cap=100)
    context: dict[str, JSONValue] = {"k": "x" * 80}
    again: dict[str, JSONValue] = {"k": "y" * 80}  # same size, replaces the old value
    assert budget.refuses(context, again, _size(again)) is None  # measured: it fits
    assert budget.refuses(again, again, _size(again)) is None  # and again


def test_a_parallel_pass_counts_the_data_its_siblings_merged() -> None:
    budget = ContextBudget(cap=100)
    start: dict[str, JSONValue] = {}
    first: dict[str, JSONValue] = {"a": "x" * 50}
    second: dict[str, JSONValue] = {"b": "y" * 50}
    budget.start_pass(parallel=True)
    assert budget.refuses(start, first, _size(first)) is None
    # Each saw the context as the pass found it: together they pass the cap.
    assert budget.refuses(start, second, _size(second)) == encoded_size({**first, **second})
    budget.end_pass()


def test_a_parallel_pass_counts_the_data_of_the_rows_it_reused() -> None:
    # After a lost worker: a sibling's completed row is reused, its data merged at the end.
    budget = ContextBudget(cap=100)
    budget.start_pass(parallel=True)
    reused: dict[str, JSONValue] = {"a": "x" * 50}
    budget.reused(reused)
    data: dict[str, JSONValue] = {"b": "y" * 50}
    assert budget.refuses({}, data, _size(data)) == encoded_size({**reused, **data})
    budget.end_pass()


def test_a_context_over_the_cap_is_refused_with_its_cause() -> None:
    budget = ContextBudget(cap=20)
    budget.check({"a": "1"}, "with the input resumed at checkpoint 'ok'", "s")  # fits
    budget.forget()  # the context changes by what was not counted
    with pytest.raises(ContextTooLargeError) as refused:
        budget.check({"a": "x" * 30}, "with the input resumed at checkpoint 'big'", "s")
    assert str(refused.value) == (
        "stage 's': the context is 38 bytes encoded with the input resumed at checkpoint "
        "'big', over the 20-byte cap of a template's context (its result)"
    )
    assert (refused.value.stage, refused.value.operation) == ("s", None)


# -- on PostgreSQL ------------------------------------------------------------------------------


def _returning(data: dict[str, JSONValue], calls: list[int]) -> Any:
    async def handle(ctx: OperationContext) -> OperationResult:
        calls.append(ctx.attempt)
        return completed(data)

    return handle


def _fast(operation_type: str, **options: Any) -> Operation:
    return Operation(type=operation_type, retry_base_ms=0, retry_max_ms=0, **options)


async def test_operation_data_that_would_pass_the_cap_fails_its_attempts_and_the_instance_at_once(
    store: Store,
) -> None:
    calls: list[int] = []
    template = Template(
        type="growing",
        stages=[
            Stage(name="load", operations=[_fast("small")]),
            Stage(name="grow", operations=[_fast("big", max_attempts=2), _fast("after")]),
        ],
        retry=RetryPolicy(max_attempts=3),
    )
    operations = OperationRegistry(
        {
            "small": _returning({"small": True}, []),
            "big": _returning({"blob": "y" * 200 * KIB}, calls),  # under 256 KiB alone
            "after": _returning({}, []),
        }
    )
    engine = make_engine(store, compile_template(template, operations))
    enqueued = await engine.enqueue("growing", {"params": "x" * 100 * KIB})  # under it too
    assert await engine.tick() == 1
    record = await engine.get(enqueued.instance_id)
    assert record is not None
    # At once, for good: no attempt of the instance's RetryPolicy would change the context.
    assert (record.status, record.attempts) == (Status.FAILED, 1)
    cap = context_cap(template)
    assert record.last_error is not None
    assert record.last_error.startswith(
        "StageFailedError: stage 'grow': operation 'big' (#0) failed after 2 attempt(s): data "
        "refused: with it the context would be "
    )
    assert record.last_error.endswith(
        f"over the {cap}-byte cap of a template's context (its result)"
    )
    assert calls == [1, 2]  # the operation's own attempts, as for data that is not JSON
    (failure,) = (await store.failures([enqueued.instance_id], 10))[enqueued.instance_id]
    assert (failure.stage, failure.operation) == ("grow", "big")
    rows = {(r.stage, r.position): r for r in await engine.operations(enqueued.instance_id)}
    big = rows["grow", 0]
    assert (big.status, big.attempts, big.data) == ("failed", 2, None)


async def test_a_non_critical_operation_whose_data_would_pass_the_cap_is_left_out(
    store: Store,
) -> None:
    template = Template(
        type="optional_growth",
        stages=[
            Stage(
                name="s",
                parallel=True,
                operations=[
                    _fast("big", critical=False, max_attempts=1),
                    _fast("fine"),
                ],
            )
        ],
    )
    operations = OperationRegistry(
        {
            "big": _returning({"blob": "y" * 200 * KIB}, []),
            "fine": _returning({"fine": True}, []),
        }
    )
    engine = make_engine(store, compile_template(template, operations))
    enqueued = await engine.enqueue("optional_growth", {"params": "x" * 100 * KIB})
    await engine.tick()
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED, done.last_error
    assert done.result == {"context": {"params": "x" * 100 * KIB, "fine": True}}
    assert done.message == "s: 1 of 2 operations done (1 failed)"


def _reviewed(calls: list[int]) -> Any:
    template = Template(
        type="reviewed",
        stages=[
            Stage(name="draft", operations=[_fast("noop")]),
            Stage(name="publish", operations=[_fast("noop")]),
        ],
        checkpoints=[Checkpoint(after_stage="draft", label="approve")],
        retry=RetryPolicy(max_attempts=3),
    )
    return template, compile_template(template, OperationRegistry({"noop": _returning({}, calls)}))


def test_the_room_for_a_resume_input_is_what_the_context_can_take_under_its_label() -> None:
    context: dict[str, JSONValue] = {"a": "1"}
    room = input_room(context, "ok", cap=100)
    for size in (room, room + 1):  # exact: the label and its separators are counted
        merged = {**context, "ok": "z" * (size - 2)}  # an input of `size` bytes encoded
        assert (encoded_size(merged) <= 100) == (size == room)
    # An input under a label the context has replaces its value; an empty context has no comma.
    assert input_room({"ok": "x" * 50}, "ok", cap=100) == input_room({}, "ok", cap=100)
    assert input_room({}, "ok", cap=100) == 100 - len('{"ok":}')
    assert input_room({"a": "x" * 200}, "ok", cap=100) == 0


async def test_a_resume_input_that_would_take_the_context_past_the_cap_is_refused_at_resume(
    store: Store,
) -> None:
    # It was accepted, and failed the instance at the next stage: a reviewer's input lost, and
    # a retry met the same context. Now the pause keeps the room left, and the resume checks.
    calls: list[int] = []
    template, compiled = _reviewed(calls)
    engine = make_engine(store, compiled)
    enqueued = await engine.enqueue("reviewed", {"draft": "x" * 150 * KIB})
    await engine.tick()
    room = input_room({"draft": "x" * 150 * KIB}, "approve", context_cap(template))
    fitting = {"notes": "y" * (room - len('{"notes":""}'))}
    assert _size(fitting) == room
    with pytest.raises(InvalidInputError) as refused:
        await engine.resume(enqueued.instance_id, {"notes": fitting["notes"] + "y"})
    assert str(refused.value) == (
        f"input is {room + 1} bytes encoded; checkpoint 'approve' takes at most {room}"
    )
    paused = await engine.get(enqueued.instance_id)
    assert paused is not None
    assert (paused.status, paused.checkpoint) == (Status.PAUSED, "approve")
    await engine.resume(enqueued.instance_id, fitting)  # to the byte
    await engine.tick()
    record = await engine.get(enqueued.instance_id)
    assert record is not None
    assert record.status == Status.COMPLETED, record.last_error
    assert record.result == {"context": {"draft": "x" * 150 * KIB, "approve": fitting}}
    assert calls == [1, 1]


async def test_a_pause_from_before_its_room_was_kept_fails_the_instance_at_the_next_stage(
    store: Store,
) -> None:
    # An instance paused by an earlier release has no room in its wait: the resume accepts
    # the input, and the next stage refuses it, failing the instance at once.
    calls: list[int] = []
    _, compiled = _reviewed(calls)
    engine = make_engine(store, compiled)
    enqueued = await engine.enqueue("reviewed", {"draft": "x" * 150 * KIB})
    await engine.tick()
    async with store.connection() as conn:
        await conn.execute("UPDATE laneway.instances SET wait = wait - 'max_input_bytes'")
    await engine.resume(enqueued.instance_id, {"notes": "y" * 150 * KIB})  # under 256 KiB
    await engine.tick()
    record = await engine.get(enqueued.instance_id)
    assert record is not None
    assert (record.status, record.attempts) == (Status.FAILED, 2)  # the draft's, and this one
    assert record.last_error is not None
    assert record.last_error.startswith("ContextTooLargeError: stage 'publish': the context is ")
    assert "encoded with the input resumed at checkpoint 'approve', over the" in record.last_error
    assert calls == [1]  # publish never ran
    failures = (await store.failures([enqueued.instance_id], 10))[enqueued.instance_id]
    assert [(f.type, f.stage, f.operation) for f in failures] == [
        ("ContextTooLargeError", "publish", None)
    ]


async def test_params_that_leave_no_room_for_the_result_fail_the_instance_at_once(
    store: Store,
) -> None:
    # Params within the payload cap, but a context that cannot fit in a result with it.
    template = Template(type="full", stages=[Stage(name="s", operations=[_fast("noop")])])
    engine = make_engine(
        store, compile_template(template, OperationRegistry({"noop": _returning({}, [])}))
    )
    params: dict[str, JSONValue] = {"p": "x" * (context_cap(template) - len('{"p":""}') + 1)}
    assert context_cap(template) < _size(params) <= MAX_PAYLOAD_BYTES
    enqueued = await engine.enqueue("full", params)
    await engine.tick()
    record = await engine.get(enqueued.instance_id)
    assert record is not None
    assert (record.status, record.attempts) == (Status.FAILED, 1)
    assert record.last_error == (
        f"ContextTooLargeError: stage 's': the context is {_size(params)} bytes encoded at the "
        f"template's end, over the {context_cap(template)}-byte cap of a template's context "
        "(its result)"
    )
