"""Review decisions: a checkpoint's input schema, the input reaching the workflow, expiry."""

import asyncpg
import pytest

from app.examples import REVIEW_INPUT_SCHEMA
from laneway.engine import (
    Checkpoint,
    Done,
    HandlerContext,
    OnExpiry,
    Operation,
    OperationContext,
    OperationRegistry,
    OperationResult,
    Pause,
    Stage,
    Template,
    Workflow,
    compile_template,
    completed,
)
from laneway.engine.waits import validate_input
from laneway.errors import ConflictError, InputRejectedError, InvalidInputError
from laneway.model import EventType, InstanceFilter, JSONValue, Status
from laneway.store import Store
from tests.engine.helpers import eventually, make_engine, types_of, until_status

SCHEMA = REVIEW_INPUT_SCHEMA  # the `review` example's


def _decider(name: str, **pause: object) -> Workflow:
    async def ask(ctx: HandlerContext, params: JSONValue) -> Pause:
        return Pause("decide", "decided", {"untouched": True}, **pause)  # type: ignore[arg-type]

    async def decided(ctx: HandlerContext, params: JSONValue) -> Done:
        return Done({"params": params})

    return Workflow(name, handlers={"ask": ask, "decided": decided}, initial="ask")


decider = _decider("decider", input_schema=SCHEMA)


async def test_valid_input_becomes_the_next_actions_params(store: Store) -> None:
    engine = make_engine(store, decider)
    enqueued = await engine.enqueue("decider")
    await engine.tick()
    paused = await engine.get(enqueued.instance_id)
    assert paused is not None
    assert paused.status == Status.PAUSED
    assert paused.checkpoint_input_schema == SCHEMA
    resumed = await engine.resume(enqueued.instance_id, {"decision": "approve", "comment": "ok"})
    assert resumed.status == Status.PENDING
    assert resumed.checkpoint_input_schema is None
    await engine.tick()
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.result == {"params": {"decision": "approve", "comment": "ok"}}


ORDERED_SCHEMA = {
    "type": "object",
    "required": ["decision"],
    "properties": {
        "decision": {"enum": ["approve", "reject"]},
        "comment": {"type": "string"},
        "score": {"type": "integer"},
    },
}


async def test_the_schemas_properties_keep_their_authors_order(
    store: Store, admin: asyncpg.Connection
) -> None:
    # jsonb orders an object's keys by length: checkpointInputSchema, and the dashboard's form
    # built from it, listed score, comment, decision.
    engine = make_engine(store, _decider("ordered", input_schema=ORDERED_SCHEMA))
    enqueued = await engine.enqueue("ordered")
    await engine.tick()
    paused = await engine.get(enqueued.instance_id)
    assert paused is not None
    assert list(paused.checkpoint_input_schema["properties"]) == ["decision", "comment", "score"]
    assert paused.checkpoint_input_schema == ORDERED_SCHEMA
    # The schema stays an object in the wait, where the processes of 0.3.5 read it.
    stored = await admin.fetchval(
        "SELECT wait -> 'input_schema' FROM laneway.instances WHERE instance_id = $1",
        enqueued.instance_id,
    )
    assert stored == ORDERED_SCHEMA
    # A wait written by 0.3.5 has no order: its schema reads as stored, and still checks.
    await admin.execute(
        "UPDATE laneway.instances SET wait = wait - 'input_schema_order' WHERE instance_id = $1",
        enqueued.instance_id,
    )
    older = await engine.get(enqueued.instance_id)
    assert older is not None
    assert older.checkpoint_input_schema == ORDERED_SCHEMA
    with pytest.raises(InputRejectedError):
        await engine.resume(enqueued.instance_id, {"decision": "approve", "score": "high"})
    resumed = await engine.resume(enqueued.instance_id, {"decision": "approve", "score": 3})
    assert resumed.status == Status.PENDING


@pytest.mark.parametrize(
    ("bad", "path"),
    [
        ({"decision": "maybe"}, "$.decision"),
        ({"comment": "no decision"}, "$"),
        ({"decision": "approve", "extra": 1}, "$"),
        (None, "$"),
        ({"decision": "reject", "comment": 5}, "$.comment"),
    ],
)
async def test_invalid_input_is_refused_naming_the_path_and_stays_paused(
    store: Store, bad: JSONValue, path: str
) -> None:
    engine = make_engine(store, decider)
    enqueued = await engine.enqueue("decider")
    await engine.tick()
    with pytest.raises(InputRejectedError) as refused:
        await engine.resume(enqueued.instance_id, bad)
    assert refused.value.problems[0][0] == path
    assert path in str(refused.value)
    assert "'decide'" in str(refused.value)
    still = await engine.get(enqueued.instance_id)
    assert still is not None
    assert still.status == Status.PAUSED
    assert still.checkpoint == "decide"
    assert EventType.RESUMED not in await types_of(store, enqueued.instance_id)


async def test_without_a_schema_any_input_goes_and_none_keeps_the_pause_params(
    store: Store,
) -> None:
    plain = _decider("plain")
    engine = make_engine(store, plain)
    with_input = await engine.enqueue("plain")
    without = await engine.enqueue("plain")
    await engine.tick()
    await engine.resume(with_input.instance_id, [1, 2])
    await engine.resume(without.instance_id)
    await engine.tick()
    first = await engine.get(with_input.instance_id)
    second = await engine.get(without.instance_id)
    assert first is not None
    assert second is not None
    assert first.result == {"params": [1, 2]}
    assert second.result == {"params": {"untouched": True}}


@pytest.mark.parametrize(
    ("expiry", "status", "result", "error"),
    [
        (
            OnExpiry("resume", {"decision": "reject"}),
            Status.COMPLETED,
            {"decision": "reject"},
            None,
        ),
        (OnExpiry("cancel"), Status.CANCELLED, None, None),
        (None, Status.FAILED, None, "CheckpointExpired: checkpoint 'decide' expired after 0.2 s"),
    ],
)
async def test_an_expiring_checkpoint_runs_its_action(
    store: Store,
    expiry: OnExpiry | None,
    status: Status,
    result: JSONValue,
    error: str | None,
) -> None:
    expiring = _decider("expiring", input_schema=SCHEMA, timeout_seconds=0.2, on_expiry=expiry)
    engine = make_engine(store, expiring)
    enqueued = await engine.enqueue("expiring")
    await engine.tick()
    reason = await engine.waiting_reason(enqueued.instance_id)
    assert reason is not None
    assert reason.code == "AWAITING_REVIEW"
    assert reason.until is not None
    assert "expires at" in reason.message
    async with engine.running():
        ended = await until_status(store, enqueued.instance_id, status)
    assert ended.result == (None if result is None else {"params": result})
    assert ended.last_error == error
    with pytest.raises(ConflictError):
        await engine.resume(enqueued.instance_id, {"decision": "approve"})


def test_bad_schemas_and_expiries_are_refused_where_they_are_made() -> None:
    with pytest.raises(InvalidInputError, match="not a valid JSON Schema"):
        Pause("decide", "next", input_schema={"type": "no-such-type"})
    with pytest.raises(InvalidInputError, match="must be a JSON Schema object"):
        Pause("decide", "next", input_schema=["not", "a", "schema"])
    with pytest.raises(
        InvalidInputError,
        match="the expiry's default input does not match: input rejected by the input schema",
    ):
        Pause(
            "decide", "next", input_schema=SCHEMA, timeout_seconds=5, on_expiry=OnExpiry("resume")
        )
    with pytest.raises(InvalidInputError, match="needs timeout_seconds"):
        Pause("decide", "next", on_expiry=OnExpiry("cancel"))
    with pytest.raises(InvalidInputError, match="only an expiry that resumes"):
        Pause("decide", "next", timeout_seconds=5, on_expiry=OnExpiry("fail", {"x": 1}))
    with pytest.raises(InvalidInputError, match="not a valid JSON Schema"):
        Checkpoint(after_stage="a", label="decide", input_schema={"required": "decision"})


@pytest.mark.parametrize(
    ("schema", "value", "said"),
    [
        ({"type": "object"}, None, 'null is not of type "object"'),
        ({"type": ["string", "null"]}, True, 'true is not of type "string", "null"'),
        ({"enum": ["yes", None]}, "maybe", '"maybe" is not one of ["yes", null]'),
        ({"const": False}, 0, "false was expected"),
        ({"required": ["decision"]}, {}, '"decision" is a required property'),
        (
            {"additionalProperties": False},
            {"extra": 1, "it's": 2},
            'Additional properties are not allowed ("extra", "it\'s" were unexpected)',
        ),
        ({"dependentRequired": {"a": ["b"]}}, {"a": 1}, '"b" is a dependency of "a"'),
        ({"pattern": "^a"}, "b", '"b" does not match "^a"'),
        ({"not": {"type": "null"}}, None, 'null should not be valid under {"type": "null"}'),
        ({"maxItems": 1}, [True, None], "[true, null] is too long"),
        (False, {"k": None}, 'False schema does not allow {"k": null}'),
        ({"type": "object"}, "x" * 300, '"' + "x" * 98 + '… is not of type "object"'),
    ],
)
def test_a_refusal_names_values_in_json_cut_short(
    schema: JSONValue, value: JSONValue, said: str
) -> None:
    with pytest.raises(InputRejectedError) as refused:
        validate_input(schema, value, label="decide")
    assert refused.value.problems[0][1] == said
    assert str(refused.value).endswith(said)


def test_a_refused_schema_names_its_values_in_json() -> None:
    with pytest.raises(InvalidInputError) as refused:
        Pause("decide", "next", input_schema={"required": "decision"})
    assert str(refused.value).endswith('"decision" is not of type "array"')


async def _draft(ctx: OperationContext) -> OperationResult:
    return completed({"draft": "v1"})


async def _publish(ctx: OperationContext) -> OperationResult:
    decision = ctx.context.get("approve_draft")
    assert isinstance(decision, dict)
    return completed(
        {"published": decision["decision"] == "approve", "note": decision.get("comment")}
    )


reviewed_template = compile_template(
    Template(
        type="reviewed_doc",
        stages=[
            Stage(name="draft", operations=[Operation(type="draft")]),
            Stage(name="publish", operations=[Operation(type="publish")]),
        ],
        checkpoints=[Checkpoint(after_stage="draft", label="approve_draft", input_schema=SCHEMA)],
    ),
    OperationRegistry({"draft": _draft, "publish": _publish}),
)


async def test_a_templates_input_joins_the_context_under_the_label(store: Store) -> None:
    engine = make_engine(store, reviewed_template)
    enqueued = await engine.enqueue("reviewed_doc", {})
    await engine.tick()
    paused = await engine.get(enqueued.instance_id)
    assert paused is not None
    assert paused.checkpoint == "approve_draft"
    assert paused.checkpoint_input_schema == SCHEMA
    with pytest.raises(InputRejectedError, match=r"\$\.decision"):
        await engine.resume(enqueued.instance_id, {"decision": "sure"})
    await engine.resume(enqueued.instance_id, {"decision": "approve", "comment": "ship it"})
    for _ in range(3):
        await engine.tick()
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED
    context = done.result["context"]
    assert context["approve_draft"] == {"decision": "approve", "comment": "ship it"}
    assert context["published"] is True
    assert context["note"] == "ship it"


async def _ask_twice(ctx: HandlerContext, params: JSONValue) -> Pause:
    asked = int(ctx.state.get("asked") or 0) + 1
    ctx.state["asked"] = asked
    # The first pause expires at once; the one a retry makes waits long enough to be resumed.
    return Pause(
        "decide", "decided", input_schema=SCHEMA, timeout_seconds=0.2 if asked == 1 else 600
    )


async def _decided(ctx: HandlerContext, params: JSONValue) -> Done:
    return Done({"params": params, "asked": ctx.state["asked"]})


async def test_a_retried_expired_checkpoint_pauses_again(store: Store) -> None:
    expiring = Workflow(
        "expiring_fail", handlers={"ask": _ask_twice, "decided": _decided}, initial="ask"
    )
    engine = make_engine(store, expiring)
    enqueued = await engine.enqueue("expiring_fail")
    async with engine.running():
        await until_status(store, enqueued.instance_id, Status.FAILED)
        await engine.retry(enqueued.instance_id)
        again = await until_status(store, enqueued.instance_id, Status.PAUSED)
    assert again.checkpoint == "decide"
    assert again.checkpoint_input_schema == SCHEMA
    await engine.resume(enqueued.instance_id, {"decision": "approve"})
    await engine.tick()
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.result == {"params": {"decision": "approve"}, "asked": 2}


def _marking_template(name: str, after_stage: str, runs: list[str]) -> Workflow:
    """Three stages, each recording its name in the context (and in `runs`), with a
    checkpoint after `after_stage` that expires (and so fails the instance) after 1 s."""

    async def mark(ctx: OperationContext) -> OperationResult:
        runs.append(ctx.stage)
        return completed({ctx.stage: True})

    return compile_template(
        Template(
            type=name,
            stages=[
                Stage(name=stage, operations=[Operation(type="mark")])
                for stage in ("s1", "s2", "s3")
            ],
            checkpoints=[
                Checkpoint(
                    after_stage=after_stage,
                    label="approve",
                    input_schema={"type": "object", "required": ["ok"]},
                    timeout_seconds=1,
                )
            ],
        ),
        OperationRegistry({"mark": mark}),
    )


@pytest.mark.parametrize("after_stage", ["s1", "s3"])
async def test_a_retried_expired_template_checkpoint_pauses_again(
    store: Store, after_stage: str
) -> None:
    # Not `completed` with the stages after it never run, nor the instance's params taken for
    # the reviewer's decision: the checkpoint asks again, and its decision is what goes on.
    runs: list[str] = []
    name = f"expiring_after_{after_stage}"
    engine = make_engine(store, _marking_template(name, after_stage, runs))
    enqueued = await engine.enqueue(name, {"x": 1})
    async with engine.running():
        failed = await until_status(store, enqueued.instance_id, Status.FAILED)
    assert failed.last_error == "CheckpointExpired: checkpoint 'approve' expired after 1 s"
    await engine.retry(enqueued.instance_id)
    await engine.tick()
    again = await engine.get(enqueued.instance_id)
    assert again is not None
    assert again.status == Status.PAUSED
    assert again.checkpoint == "approve"
    await engine.resume(enqueued.instance_id, {"ok": True})
    for _ in range(3):
        await engine.tick()
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED
    context = {"x": 1, "s1": True, "s2": True, "s3": True, "approve": {"ok": True}}
    assert done.result == {"context": context}
    assert sorted(runs) == ["s1", "s2", "s3"]  # each stage's operation ran once


async def test_a_resume_after_the_checkpoint_expired_is_a_conflict(store: Store) -> None:
    # Expired, though no engine has woken it yet: the expiry decides (here: it fails), not a
    # decision that came too late, whether it comes alone or in a bulk resume.
    expiring = _decider("expiring_late", timeout_seconds=0.2)
    engine = make_engine(store, expiring)
    enqueued = await engine.enqueue("expiring_late")
    await engine.tick()

    async def expired() -> bool:
        async with store.connection() as conn:
            passed: bool = await conn.fetchval(
                "SELECT wake_at < now() FROM laneway.instances WHERE instance_id = $1",
                enqueued.instance_id,
            )
        return passed

    await eventually(expired, bool)
    with pytest.raises(ConflictError, match="its checkpoint 'decide' expired"):
        await engine.resume(enqueued.instance_id, {"decision": "approve"})
    bulk = await engine.resume_many(InstanceFilter(name="expiring_late"))
    assert (bulk.matched, bulk.changed) == (1, 0)
    await engine.tick()
    failed = await engine.get(enqueued.instance_id)
    assert failed is not None
    assert failed.status == Status.FAILED
    assert failed.last_error == "CheckpointExpired: checkpoint 'decide' expired after 0.2 s"
