"""Failures you can debug (issue #20, point 3): every failed attempt keeps its exception's
type, message and a bounded traceback; lastError reads `Type: message`; attempts never go
back; a workflow's state validator checks the state before it is checkpointed."""

import asyncio
import re
from typing import Any, cast
from uuid import UUID

import pydantic
import pytest

from laneway.engine import Done, HandlerContext, Next, Pause, RetryPolicy, Workflow
from laneway.engine.failures import (
    MAX_TRACEBACK_CHARS,
    failure_of,
    format_traceback,
    type_name,
)
from laneway.engine.payloads import storable_text, text_storable
from laneway.engine.template import (
    Operation,
    OperationContext,
    OperationRegistry,
    OperationResult,
    Stage,
    Template,
    completed,
    failed,
)
from laneway.engine.template_interpreter import compile_template
from laneway.errors import InvalidInputError
from laneway.model import JSONValue, Status
from laneway.store import Store
from tests.engine.helpers import make_engine


class PaymentDeclinedError(Exception):
    """A user's own exception class: its type is named with its module."""


async def _charge(ctx: HandlerContext, params: JSONValue) -> Done:
    if ctx.attempt == 1:
        raise PaymentDeclinedError("card 4242 declined")
    if ctx.attempt == 2:
        raise KeyError("missing")
    return Done({"charged": True})


charger = Workflow(
    "charger",
    handlers={"charge": _charge},
    initial="charge",
    retry=RetryPolicy(max_attempts=3, backoff="fixed", base_ms=0),
)


def test_a_type_is_qualified_by_its_module_unless_builtin_laneways_or_main() -> None:
    # README: "qualified by its module ... unless it is a builtin, one of Laneway's own ...,
    # or defined in the script run as `__main__`".
    scripts = type("ScriptError", (Exception,), {"__module__": "__main__"})
    assert type_name(KeyError("k")) == "KeyError"
    assert type_name(InvalidInputError("bad")) == "InvalidInputError"
    assert type_name(scripts()) == "ScriptError"
    assert type_name(PaymentDeclinedError()) == f"{__name__}.PaymentDeclinedError"


async def test_each_failed_attempt_keeps_its_type_message_and_traceback(store: Store) -> None:
    engine = make_engine(store, charger)
    enqueued = await engine.enqueue("charger")
    for _ in range(3):
        await engine.tick()
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED
    # lastError keeps the last failed attempt's error after a later one succeeded.
    assert done.last_error == "KeyError: 'missing'"
    assert done.attempts == 3
    failures = (await store.failures([enqueued.instance_id], 10))[enqueued.instance_id]
    assert [(f.attempt, f.type, f.message) for f in failures] == [
        (2, "KeyError", "'missing'"),
        (1, "tests.engine.test_failures.PaymentDeclinedError", "card 4242 declined"),
    ]
    for failure in failures:
        assert failure.traceback is not None
        assert "in _charge" in failure.traceback
        assert failure.traceback.rstrip().endswith(f"{failure.type}: {failure.message}")
    assert failures[0].at >= failures[1].at


def test_a_deep_traceback_keeps_its_innermost_frames_within_the_cap() -> None:
    # Two functions in turn, so Python's own traceback does not fold the frames together.
    def down(depth: int) -> None:
        if depth == 0:
            raise RuntimeError("at the bottom")
        further(depth - 1)

    def further(depth: int) -> None:
        down(depth)

    with pytest.raises(RuntimeError) as caught:
        down(200)
    text = format_traceback(caught.value)
    assert text is not None
    assert len(text) <= MAX_TRACEBACK_CHARS
    assert text.startswith("… (earlier frames omitted)")
    assert text.rstrip().endswith("RuntimeError: at the bottom")
    failure = failure_of(caught.value)
    assert failure.last_error == "RuntimeError: at the bottom"


def test_a_cut_chain_names_the_exception_it_began_with() -> None:
    # Found by an outside audit: a long chain kept its last 8,000 characters, and Python
    # prints the first exception (the root cause) first, so nothing named it.
    def chained(depth: int) -> None:
        try:
            if depth == 0:
                raise KeyError("root cause")
            chained(depth - 1)
        except Exception as exc:
            raise ValueError(f"level {depth}") from exc

    with pytest.raises(ValueError, match="level 200") as caught:
        chained(200)
    text = format_traceback(caught.value)
    assert text is not None
    assert len(text) <= MAX_TRACEBACK_CHARS
    first_line = text.splitlines()[0]
    assert first_line == "… (earlier frames omitted; the chain began with KeyError: 'root cause')"
    assert text.rstrip().endswith("ValueError: level 200")


def test_a_chain_keeps_a_root_cause_that_was_also_the_hidden_context() -> None:
    # Found by an outside audit: a cause raised inside the handler of its own cause (`from e`
    # within `except e`) was left out, as the hidden __context__ of the outer exception was
    # built first and marked seen; Python's own traceback prints it.
    def chained(links: int) -> None:
        try:
            raise KeyError("root cause")
        except KeyError as root:
            cause: BaseException = root
            for n in range(links):
                try:
                    raise ValueError(f"link {n}") from cause
                except ValueError as link:
                    cause = link
            raise RuntimeError("top") from cause

    with pytest.raises(RuntimeError, match="top") as caught:
        chained(1)
    text = format_traceback(caught.value)
    assert text is not None
    assert "KeyError: 'root cause'" in text
    with pytest.raises(RuntimeError, match="top") as caught:
        chained(60)  # long enough to be cut: the marker names the root
    text = format_traceback(caught.value)
    assert text is not None
    assert text.splitlines()[0] == (
        "… (earlier frames omitted; the chain began with KeyError: 'root cause')"
    )


async def _pause_first(ctx: HandlerContext, params: JSONValue) -> Pause:
    return Pause("check", "flaky")


async def _flaky(ctx: HandlerContext, params: JSONValue) -> Done:
    raise RuntimeError(f"attempt {ctx.attempt} of this step")


counted = Workflow(
    "counted",
    handlers={"start": _pause_first, "flaky": _flaky},
    initial="start",
    retry=RetryPolicy(max_attempts=2, backoff="fixed", base_ms=0),
)


async def test_attempts_never_go_back_across_resume_and_retry(store: Store) -> None:
    engine = make_engine(store, counted)
    enqueued = await engine.enqueue("counted")
    seen: list[int] = []

    async def attempts() -> int:
        record = await engine.get(enqueued.instance_id)
        assert record is not None
        seen.append(record.attempts)
        return record.attempts

    await engine.tick()  # attempt 1 pauses
    assert await attempts() == 1
    resumed = await engine.resume(enqueued.instance_id)
    assert resumed.attempts == 1  # a resume does not reset the count
    await engine.tick()
    await engine.tick()  # attempts 2 and 3: the step's two, then failed
    assert await attempts() == 3
    failed = await engine.get(enqueued.instance_id)
    assert failed is not None
    assert failed.status == Status.FAILED
    assert failed.last_error == "RuntimeError: attempt 2 of this step"
    retried = await engine.retry(enqueued.instance_id)
    assert retried.attempts == 3
    await engine.tick()
    await engine.tick()  # a fresh budget of two: attempts 4 and 5
    assert await attempts() == 5
    again = await engine.get(enqueued.instance_id)
    assert again is not None
    assert again.last_error == "RuntimeError: attempt 2 of this step"  # the step's own count
    assert seen == sorted(seen)
    failures = (await store.failures([enqueued.instance_id], 10))[enqueued.instance_id]
    assert [f.attempt for f in failures] == [5, 4, 3, 2]


class Counter(pydantic.BaseModel):
    count: int


async def _count(ctx: HandlerContext, params: JSONValue) -> Next | Done:
    if ctx.state.get("count") == 1:
        ctx.state["count"] = "two"  # not an int: refused before it is checkpointed
        return Done()
    ctx.state["count"] = 1
    return Next("count")


validated = Workflow(
    "validated",
    handlers={"count": _count},
    initial="count",
    state_validator=Counter,
    retry=RetryPolicy(max_attempts=1),
)


async def test_a_state_the_validator_refuses_fails_the_attempt_and_is_never_checkpointed(
    store: Store,
) -> None:
    engine = make_engine(store, validated)
    enqueued = await engine.enqueue("validated")
    await engine.tick()
    failed = await engine.get(enqueued.instance_id)
    assert failed is not None
    assert failed.status == Status.FAILED
    assert failed.state == {"count": 1}  # the last valid checkpoint
    [failure] = (await store.failures([enqueued.instance_id], 10))[enqueued.instance_id]
    assert failure.type == "InvalidStateError"
    assert "count" in failure.message
    assert "state rejected by 'validated'" in failure.message


async def _keep(ctx: HandlerContext, params: JSONValue) -> Next:
    ctx.state["kept"] = True
    return Next("replace")


async def _replace_state(ctx: HandlerContext, params: JSONValue) -> Next:
    ctx.state = ["not", "a", "dict"]  # type: ignore[assignment]
    return Next("read")


async def _read(ctx: HandlerContext, params: JSONValue) -> Done:
    return Done({"kept": ctx.state["kept"]})


replacer = Workflow(
    "replacer",
    handlers={"keep": _keep, "replace": _replace_state, "read": _read},
    initial="keep",
    retry=RetryPolicy(max_attempts=1),
)


async def test_a_state_replaced_by_what_is_not_a_dict_fails_the_attempt(store: Store) -> None:
    # It was checkpointed, and the next handler's ctx.state["kept"] raised a TypeError.
    engine = make_engine(store, replacer)
    enqueued = await engine.enqueue("replacer")
    await engine.tick()
    failed = await engine.get(enqueued.instance_id)
    assert failed is not None
    assert (failed.status, failed.state) == (Status.FAILED, {"kept": True})
    [failure] = (await store.failures([enqueued.instance_id], 10))[enqueued.instance_id]
    assert (failure.type, failure.message) == (
        "InvalidStateError",
        "ctx.state must be a dict (a JSON object), not list",
    )


async def test_a_retried_attempt_logs_a_warning_and_the_final_failure_an_error(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(store, counted)
    enqueued = await engine.enqueue("counted")
    await engine.tick()
    await engine.resume(enqueued.instance_id)
    with caplog.at_level("INFO", logger="laneway.engine.runner"):
        await engine.tick()
        await engine.tick()
    logged = [r for r in caplog.records if r.name == "laneway.engine.runner"]
    assert [(r.levelname, r.getMessage()) for r in logged] == [
        ("WARNING", "attempt failed, retrying"),
        ("ERROR", "instance failed"),
    ]
    for record in logged:
        assert record.__dict__["instance_id"] == str(enqueued.instance_id)
        assert "RuntimeError: attempt" in record.__dict__["error"]
        assert "in _flaky" in record.__dict__["traceback"]


async def test_texts_postgres_cannot_hold_are_replaced_and_spoil_no_other_write(
    store: Store,
) -> None:
    # A NUL character or a lone surrogate in an exception's message (so in its traceback too),
    # or in a reported status line, made PostgreSQL refuse the whole group commit: the other
    # instances of the batch stayed running with it. They are written as U+FFFD instead.
    async def poisoned(ctx: HandlerContext, params: JSONValue) -> Done:
        raise ValueError("nul \x00 and lone \udc80 here")

    async def reporting(ctx: HandlerContext, params: JSONValue) -> Done:
        ctx.report(message="half \x00 done", stage="st\udc80ge")
        return Done({"ok": True})

    engine = make_engine(
        store,
        Workflow(
            "poisoned",
            handlers={"a": poisoned},
            initial="a",
            retry=RetryPolicy(max_attempts=1),
        ),
        Workflow("reporting", handlers={"a": reporting}, initial="a"),
    )
    bad = await engine.enqueue("poisoned")
    good = await engine.enqueue("reporting")
    await engine.tick()  # both run, and their writes share one group commit
    [failed, completed] = [await engine.get(e.instance_id) for e in (bad, good)]
    assert completed is not None
    assert completed.status == Status.COMPLETED
    assert (completed.message, completed.stage) == ("half \ufffd done", "st\ufffdge")
    assert failed is not None
    assert failed.status == Status.FAILED
    assert failed.last_error == "ValueError: nul \ufffd and lone \ufffd here"
    [failure] = (await store.failures([bad.instance_id], 10))[bad.instance_id]
    assert failure.message == "nul \ufffd and lone \ufffd here"
    assert failure.traceback is not None
    assert "\x00" not in failure.traceback
    assert failure.traceback.rstrip().endswith("ValueError: nul \ufffd and lone \ufffd here")


async def _done(ctx: HandlerContext, params: JSONValue) -> Done:
    return Done()


async def _packed(ctx: HandlerContext, params: JSONValue) -> Done:
    ctx.report(message="packed", stage="packing")
    return Done()


async def _refuse_completions(
    store: Store, errcode: str, message: str, condition: str = "true"
) -> None:
    """The database refuses to mark an instance completed where `condition` holds, with
    `errcode` and `message` (a trigger standing for any refusal of its own)."""
    async with store.connection() as conn:
        await conn.execute(
            f"""
            CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN RAISE EXCEPTION '{message}' USING ERRCODE = '{errcode}'; END
            $$;
            CREATE TRIGGER refuse BEFORE UPDATE ON laneway.instances FOR EACH ROW
              WHEN (NEW.status = 'completed' AND {condition}) EXECUTE FUNCTION refuse();
            """
        )


async def test_a_write_the_database_refuses_fails_its_own_attempt_and_no_other(
    store: Store,
) -> None:
    # The database refuses one instance's completion (a trigger stands for any value or
    # constraint it will not take). Its batch-mates are written again apart and complete; the
    # refused one fails its attempt at once, with the database's reason, instead of crashing
    # its runner and holding its slot until its lease runs out.
    await _refuse_completions(
        store, "check_violation", "refused by the test", "NEW.params ->> 'refuse' = 'yes'"
    )
    batches: list[set[UUID]] = []
    commit = store.commit_runner_batch

    async def watched(owner_id: str, lease_seconds: float, writes: Any, **kwargs: Any) -> Any:
        batches.append({write.instance_id for write in writes})
        return await commit(owner_id, lease_seconds, writes, **kwargs)

    store.commit_runner_batch = watched  # type: ignore[method-assign]
    engine = make_engine(
        store,
        Workflow(
            "refusable", handlers={"a": _packed}, initial="a", retry=RetryPolicy(max_attempts=2)
        ),
    )
    refused = await engine.enqueue("refusable", {"refuse": "yes"})
    others = [await engine.enqueue("refusable", {"refuse": "no"}) for _ in range(3)]
    await engine.tick()  # all four run, and their writes share one group commit
    ids = {e.instance_id for e in others}
    assert batches[0] == ids | {refused.instance_id}  # refused as a whole, then written apart
    assert sorted(map(len, batches[1:5])) == [1, 1, 1, 1]
    for e in others:
        record = await engine.get(e.instance_id)
        assert record is not None
        assert (record.status, record.attempts) == (Status.COMPLETED, 1)
    record = await engine.get(refused.instance_id)
    assert record is not None
    assert record.status == Status.PENDING  # its second attempt is due after the backoff
    assert record.last_error is not None
    assert record.last_error.startswith(
        "StepWriteRefusedError: the database refused this step's write: "
    )
    assert "refused by the test" in record.last_error
    [failure] = (await store.failures([refused.instance_id], 10))[refused.instance_id]
    assert failure.type == "StepWriteRefusedError"
    # What its step reported stays with the failure, as with any failed attempt's
    assert (failure.stage, record.stage, record.message) == ("packing", "packing", "packed")
    # Its second attempt is refused alike, and was the last one: it fails for good.
    async with store.connection() as conn:
        await conn.execute("UPDATE laneway.instances SET run_after = now()")
    await engine.tick()
    record = await engine.get(refused.instance_id)
    assert record is not None
    assert (record.status, record.attempts) == (Status.FAILED, 2)


@pytest.mark.parametrize(
    ("text", "stored"),
    [
        ("plain", "plain"),
        ("a\x00b\x00", "a\ufffdb\ufffd"),
        ("ünïcode \U0001f600", "ünïcode \U0001f600"),
        ("pair as two \ud83d\ude00 and \x00", "pair as two \ufffd\ufffd and \ufffd"),
    ],
)
def test_storable_text_replaces_only_what_a_text_column_refuses(text: str, stored: str) -> None:
    result = storable_text(text)
    assert result == stored
    assert text_storable(result)  # valid UTF-8, no NUL: what the column takes
    assert text_storable(text) == (result == text)  # untouched exactly when it was storable


def _raise_in_user_code(ctx: OperationContext) -> None:
    raise RuntimeError(f"kaboom at attempt {ctx.attempt}")


async def _exploding(ctx: OperationContext) -> OperationResult:
    _raise_in_user_code(ctx)
    return completed()


async def _declining(ctx: OperationContext) -> OperationResult:
    return failed("declined by the bank")


@pytest.mark.parametrize("parallel", [False, True])
async def test_a_template_failure_keeps_the_traceback_of_its_operation(
    store: Store, parallel: bool
) -> None:
    template = Template(
        type="exploding",
        stages=[
            Stage(
                name="boom",
                operations=[Operation(type="explode", max_attempts=1), Operation(type="decline")],
                parallel=parallel,
            )
        ],
    )
    registry = OperationRegistry({"explode": _exploding, "decline": _declining})
    engine = make_engine(store, compile_template(template, registry))
    enqueued = await engine.enqueue("exploding")
    await engine.tick()
    (failure,) = (await store.failures([enqueued.instance_id], 10))[enqueued.instance_id]
    where = (failure.type, failure.stage, failure.operation)
    assert where == ("RuntimeError", "boom", "explode")  # the operation's exception's type
    failed_instance = await engine.get(enqueued.instance_id)
    assert failed_instance is not None
    assert failed_instance.stage == "boom"  # the instance names the stage it failed in
    assert failure.traceback is not None
    # The user's frames, the innermost last, and the operation's own exception; no engine's.
    assert "in _exploding" in failure.traceback
    assert "in _raise_in_user_code" in failure.traceback
    assert failure.traceback.rstrip().endswith("RuntimeError: kaboom at attempt 1")
    assert "stage_run.py" not in failure.traceback
    assert "runner.py" not in failure.traceback


_checks: list[int] = []


async def _check_then_decline(ctx: OperationContext) -> OperationResult:
    _checks.append(ctx.attempt)
    if len(_checks) == 1:
        _raise_in_user_code(ctx)  # the first pass raises; the verify pass returns failed
    return failed("still broken")


async def _fix(ctx: OperationContext) -> OperationResult:
    return completed()


async def test_a_template_failure_after_a_fix_cycle_has_its_last_attempts_traceback(
    store: Store,
) -> None:
    _checks.clear()
    template = Template(
        type="unfixable",
        stages=[
            Stage(
                name="verify",
                operations=[Operation(type="check", max_attempts=1)],
                fix_operations=[Operation(type="fix")],
                max_fix_cycles=1,
            )
        ],
    )
    registry = OperationRegistry({"check": _check_then_decline, "fix": _fix})
    engine = make_engine(store, compile_template(template, registry))
    enqueued = await engine.enqueue("unfixable")
    await engine.tick()
    assert len(_checks) == 2  # checked, fixed, verified
    (failure,) = (await store.failures([enqueued.instance_id], 10))[enqueued.instance_id]
    assert "still broken" in failure.message
    # The verify pass raised nothing: the first pass's exception is not its cause.
    assert "kaboom" not in (failure.traceback or "")


async def test_a_template_failure_without_an_exception_has_no_engine_traceback(
    store: Store,
) -> None:
    # The operation returned failed(...): no code of the user's raised, so there is no
    # traceback to show (the engine's frames say nothing about the user's failure).
    template = Template(
        type="declined", stages=[Stage(name="pay", operations=[Operation(type="decline")])]
    )
    engine = make_engine(
        store, compile_template(template, OperationRegistry({"decline": _declining}))
    )
    enqueued = await engine.enqueue("declined")
    await engine.tick()
    (failure,) = (await store.failures([enqueued.instance_id], 10))[enqueued.instance_id]
    assert "declined by the bank" in failure.message
    assert failure.traceback is None
    assert failure.type == "StageFailedError"  # no exception of the operation's to name


async def _declining_with_an_exception(ctx: OperationContext) -> OperationResult:
    raise PaymentDeclinedError("card 4242 declined")


async def test_a_template_failure_is_of_the_type_its_operation_raised(store: Store) -> None:
    # As a handler's: the type is the exception's (qualified by its module), not the stage's
    # failure that carries it; the message still says which stage and operation failed.
    template = Template(
        type="charging",
        stages=[Stage(name="pay", operations=[Operation(type="charge", max_attempts=1)])],
    )
    registry = OperationRegistry({"charge": _declining_with_an_exception})
    engine = make_engine(store, compile_template(template, registry))
    enqueued = await engine.enqueue("charging")
    await engine.tick()
    (failure,) = (await store.failures([enqueued.instance_id], 10))[enqueued.instance_id]
    assert failure.type == f"{__name__}.PaymentDeclinedError"
    assert failure.message == (
        "stage 'pay': operation 'charge' (#0) failed after 1 attempt(s): card 4242 declined"
    )
    assert (failure.stage, failure.operation) == ("pay", "charge")
    record = await engine.get(enqueued.instance_id)
    assert record is not None
    assert record.last_error == f"{failure.type}: {failure.message}"


def test_a_long_message_leaves_the_frames_in_the_traceback() -> None:
    def deep_in_user_code() -> None:
        raise ValueError("x" * 20_000)

    with pytest.raises(ValueError, match=r"^x+$") as caught:
        deep_in_user_code()
    text = format_traceback(caught.value)
    assert text is not None
    assert len(text) <= MAX_TRACEBACK_CHARS
    assert "in deep_in_user_code" in text
    assert "ValueError: xxx" in text
    assert "(message cut)" in text


async def _fails_once(ctx: OperationContext) -> OperationResult:
    if ctx.attempt == 1:
        raise ConnectionError("the bank hung up")
    return completed({"paid": True})


async def test_an_operation_attempt_that_fails_and_is_retried_is_logged_with_its_traceback(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    # The operation's row keeps its outcome only (completed, 2 attempts): the log is where
    # the first attempt's exception is seen.
    template = Template(
        type="retried_payment",
        stages=[Stage(name="pay", operations=[Operation(type="pay", retry_base_ms=0)])],
    )
    engine = make_engine(store, compile_template(template, OperationRegistry({"pay": _fails_once})))
    enqueued = await engine.enqueue("retried_payment")
    with caplog.at_level("INFO", logger="laneway.engine.stage_run"):
        await engine.tick()
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED
    (logged,) = [r for r in caplog.records if r.name == "laneway.engine.stage_run"]
    assert (logged.levelname, logged.getMessage()) == ("WARNING", "operation attempt failed")
    assert logged.__dict__["instance_id"] == str(enqueued.instance_id)
    assert (logged.__dict__["attempt"], logged.__dict__["max_attempts"]) == (1, 3)
    assert logged.__dict__["error"] == "the bank hung up"
    assert "in _fails_once" in logged.__dict__["traceback"]
    assert "ConnectionError: the bank hung up" in logged.__dict__["traceback"]


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("max_attempts", "3", "max_attempts must be a whole number, not '3'"),
        ("max_attempts", 2.5, "max_attempts must be a whole number, not 2.5"),
        ("timeout_seconds", None, "timeout_seconds must be a number, not None"),
        ("retry_base_ms", True, "retry_base_ms must be a number, not True"),
    ],
)
def test_operation_fields_of_the_wrong_type_are_named(field: str, value: Any, says: str) -> None:
    with pytest.raises(InvalidInputError, match=f"operation 'pay': {re.escape(says)}"):
        Operation(type="pay", **{field: value})


class _UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str exploded")


class _DeployError(Exception):
    def __init__(self) -> None:
        super().__init__("canary failed")
        self.stage = "canary"  # a user's attribute, not a template's stage


@pytest.mark.parametrize(
    ("raised", "type_", "message"),
    [
        (GeneratorExit(), "GeneratorExit", ""),
        (SystemExit(3), "SystemExit", "3"),
        (KeyboardInterrupt(), "KeyboardInterrupt", ""),
        (
            asyncio.CancelledError(),
            "asyncio.exceptions.CancelledError",
            "",
        ),  # its own, no cancel was asked
        (
            _UnprintableError(),
            "tests.engine.test_failures._UnprintableError",
            "<exception str() failed>",
        ),
        (_DeployError(), "tests.engine.test_failures._DeployError", "canary failed"),
    ],
)
async def test_whatever_a_handler_raises_is_a_failed_attempt_of_its_own_instance(
    store: Store, raised: BaseException, type_: str, message: str
) -> None:
    # Not the engine (a BaseException aborted the TaskGroup of every run, or the process), not
    # a lease waited out and recorded as WorkerLost (its own CancelledError, an exception
    # whose str() fails), not a stage taken from a user's attribute.
    async def raising(ctx: HandlerContext, params: JSONValue) -> Done:
        raise raised

    async def fine(ctx: HandlerContext, params: JSONValue) -> Done:
        return Done({"fine": True})

    engine = make_engine(
        store,
        Workflow("raising", handlers={"run": raising}, initial="run",
                 retry=RetryPolicy(max_attempts=1)),
        Workflow("fine", handlers={"run": fine}, initial="run"),
    )  # fmt: skip
    bad = await engine.enqueue("raising")
    good = await engine.enqueue("fine")
    async with asyncio.timeout(10):
        assert await engine.tick() == 2
    failed_one, done = await engine.get(bad.instance_id), await engine.get(good.instance_id)
    assert failed_one is not None
    assert done is not None
    assert (failed_one.status, done.status) == (Status.FAILED, Status.COMPLETED)
    (failure,) = (await store.failures([bad.instance_id], 10))[bad.instance_id]
    assert (failure.type, failure.message, failure.stage) == (type_, message, None)
    assert failure.traceback is not None
    assert "in raising" in failure.traceback


async def _waits_then_completes(ctx: OperationContext) -> OperationResult:
    await asyncio.sleep(0)
    return completed({"waited": True})


async def _completes(ctx: OperationContext) -> OperationResult:
    return completed({"fine": True})


@pytest.mark.parametrize(
    ("raised", "reason"),
    [
        (SystemExit(3), "SystemExit: 3"),
        (KeyboardInterrupt(), "KeyboardInterrupt"),
        (GeneratorExit(), "GeneratorExit"),
        (asyncio.CancelledError(), "CancelledError"),  # its own, no cancel was asked
    ],
)
@pytest.mark.parametrize("waits", [False, True])
async def test_whatever_an_operation_raises_is_a_failed_attempt_of_that_operation(
    store: Store, raised: BaseException, reason: str, waits: bool
) -> None:
    # As a handler's (above): the operation's own attempts, its row and its stage's failure,
    # not the stage retried whole under the instance's RetryPolicy with no operation named.
    # `waits`: it raises in a task of its own, after a sibling before it waited.
    calls: list[int] = []

    async def raising(ctx: OperationContext) -> OperationResult:
        calls.append(ctx.attempt)
        if waits:
            await asyncio.sleep(0)
        raise raised

    template = Template(
        type="raising",
        stages=[
            Stage(
                name="s",
                parallel=True,
                operations=[
                    *([Operation(type="waits")] if waits else []),
                    Operation(type="raising", max_attempts=2, retry_base_ms=0, retry_max_ms=0),
                    Operation(type="fine"),
                ],
            )
        ],
        retry=RetryPolicy(max_attempts=3),
    )
    registry = OperationRegistry(
        {"raising": raising, "fine": _completes, "waits": _waits_then_completes}
    )
    engine = make_engine(store, compile_template(template, registry))
    enqueued = await engine.enqueue("raising")
    async with asyncio.timeout(10):
        await engine.tick()
    record = await engine.get(enqueued.instance_id)
    assert record is not None
    assert (record.status, record.attempts) == (Status.FAILED, 1)  # final: no stage retry
    assert calls == [1, 2]
    position = 1 if waits else 0
    assert record.last_error == (
        f"{type_name(raised)}: stage 's': operation 'raising' (#{position}) failed after 2 "
        f"attempt(s): {reason}"
    )
    (failure,) = (await store.failures([enqueued.instance_id], 10))[enqueued.instance_id]
    where = (failure.type, failure.stage, failure.operation)
    assert where == (type_name(raised), "s", "raising")  # as a handler's (above)
    assert failure.traceback is not None
    assert "in raising" in failure.traceback
    rows = {
        r.type: (r.status, r.attempts, r.error)
        for r in await engine.operations(enqueued.instance_id)
    }
    assert rows.pop("raising") == ("failed", 2, reason)
    assert set(rows.values()) == {("completed", 1, None)}  # its siblings ran and were recorded


async def test_a_cancel_still_stops_operations_that_wait_in_tasks_of_their_own(
    store: Store,
) -> None:
    # A real cancellation (of the instance here; a shutdown past its grace alike) is no
    # operation's failure: it stops every operation of the stage, recording none.
    entered: list[int] = []
    all_in, stopped = asyncio.Event(), asyncio.Event()

    async def waits(ctx: OperationContext) -> OperationResult:
        entered.append(ctx.attempt)
        if len(entered) == 3:
            all_in.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            if len(entered) == 3:
                stopped.set()
            raise
        return completed()

    template = Template(
        type="cancelled_together",
        stages=[
            Stage(
                name="s",
                parallel=True,
                operations=[Operation(type="waits", timeout_seconds=30) for _ in range(3)],
            )
        ],
    )
    engine = make_engine(
        store,
        compile_template(template, OperationRegistry({"waits": waits})),
        poll_interval_seconds=0.05,
    )
    async with engine.running():
        enqueued = await engine.enqueue("cancelled_together")
        await asyncio.wait_for(all_in.wait(), timeout=10)
        cancelled = await engine.cancel(enqueued.instance_id)
        await asyncio.wait_for(stopped.wait(), timeout=10)
    assert cancelled.status == Status.CANCELLED
    assert entered == [1, 1, 1]  # no attempt after the cancel
    assert await engine.operations(enqueued.instance_id) == []
    record = await engine.get(enqueued.instance_id)
    assert record is not None
    assert record.status == Status.CANCELLED


def _not_async(ctx: HandlerContext, params: JSONValue) -> Done:
    _plain_calls.append(ctx.attempt)
    return Done({"never": "recorded"})


_plain_calls: list[int] = []


async def test_a_plain_def_handler_fails_the_instance_at_once_saying_why(store: Store) -> None:
    # Retrying a handler that cannot be awaited fails the same way every time: it would only
    # spend the budget (three TypeErrors), saying nothing of async def.
    _plain_calls.clear()
    plain = Workflow(
        "plain",
        handlers={"a": cast(Any, _not_async)},
        initial="a",
        retry=RetryPolicy(max_attempts=3, backoff="fixed", base_ms=0),
    )
    engine = make_engine(store, plain)
    enqueued = await engine.enqueue("plain")
    for _ in range(3):
        await engine.tick()
    record = await engine.get(enqueued.instance_id)
    assert record is not None
    assert (record.status, record.attempts) == (Status.FAILED, 1)
    assert _plain_calls == [1]
    why = (
        "handler 'a' of workflow 'plain' returned Done, not an awaitable: define it with async def"
    )
    assert record.last_error == f"NotAwaitableError: {why}"
    (failure,) = (await store.failures([enqueued.instance_id], 10))[enqueued.instance_id]
    assert (failure.type, failure.message) == ("NotAwaitableError", why)


async def test_a_plain_function_that_returns_a_coroutine_is_a_handler(store: Store) -> None:
    async def finish(value: int) -> Done:
        return Done({"value": value})

    lambdas = Workflow("lambdas", handlers={"a": lambda ctx, params: finish(7)}, initial="a")
    engine = make_engine(store, lambdas)
    enqueued = await engine.enqueue("lambdas")
    await engine.tick()
    record = await engine.get(enqueued.instance_id)
    assert record is not None
    assert (record.status, record.result) == (Status.COMPLETED, {"value": 7})


@pytest.mark.parametrize("parallel", [False, True])
async def test_a_plain_def_operation_handler_fails_its_operation_at_once(
    store: Store, parallel: bool
) -> None:
    calls: list[int] = []

    def plain(ctx: OperationContext) -> OperationResult:
        calls.append(ctx.attempt)
        return completed()

    template = Template(
        type="plain_operation",
        stages=[
            Stage(
                name="s",
                parallel=parallel,
                operations=[Operation(type="plain", retry_base_ms=0), Operation(type="fine")],
            )
        ],
        retry=RetryPolicy(max_attempts=3),
    )
    registry = OperationRegistry({"plain": cast(Any, plain), "fine": _completes})
    engine = make_engine(store, compile_template(template, registry))
    enqueued = await engine.enqueue("plain_operation")
    await engine.tick()
    record = await engine.get(enqueued.instance_id)
    assert record is not None
    assert (record.status, record.attempts) == (Status.FAILED, 1)
    assert calls == [1]  # one attempt of the operation's three
    why = (
        "operation handler 'plain' of template 'plain_operation' returned OperationResult,"
        " not an awaitable: define it with async def"
    )
    assert record.last_error == (
        f"StageFailedError: stage 's': operation 'plain' (#0) failed after 1 attempt(s): {why}"
    )
    (failure,) = (await store.failures([enqueued.instance_id], 10))[enqueued.instance_id]
    assert (failure.type, failure.operation) == ("StageFailedError", "plain")
    assert failure.traceback is None  # no code of the user's raised: no engine frames either
    rows = {r.type: (r.status, r.attempts) for r in await engine.operations(enqueued.instance_id)}
    assert rows["plain"] == ("failed", 1)


async def test_a_write_refused_as_read_only_hands_the_instance_back_without_using_an_attempt(
    store: Store,
) -> None:
    # A standby after a failover, or a database set read-only for a while, answers every
    # write with read_only_sql_transaction (a trigger stands for it here). That is the
    # database being unavailable, not the write's fault: the instance is handed back, as
    # after a lost connection, instead of failing its attempt with StepWriteRefusedError.
    await _refuse_completions(
        store, "read_only_sql_transaction", "cannot execute UPDATE in a read-only transaction"
    )
    engine = make_engine(store, Workflow("standby", handlers={"a": _done}, initial="a"))
    enqueued = await engine.enqueue("standby")
    await engine.tick()
    record = await engine.get(enqueued.instance_id)
    assert record is not None
    assert (record.status, record.last_error) == (Status.PENDING, None)  # handed back
    assert (await store.failures([enqueued.instance_id], 10))[enqueued.instance_id] == []
