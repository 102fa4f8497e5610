"""Bad input gets a clear error and writes nothing (issue #2, point 11); validators and hooks."""

import logging
import math

import pydantic
import pytest

from laneway.engine import Done, HandlerContext, Next, Workflow
from laneway.engine.handler_map import RetryPolicy
from laneway.errors import InvalidInputError
from laneway.model import InstanceRecord, Status
from laneway.store import Store
from tests.engine.helpers import make_engine
from tests.workflows import noop


async def _count(store: Store, table: str) -> int:
    async with store.connection() as conn:
        return int(await conn.fetchval(f"SELECT count(*) FROM laneway.{table}"))  # noqa: S608


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "nope"}, "unknown workflow"),
        ({"name": "noop", "params": {"x": object()}}, "params must be JSON"),
        ({"name": "noop", "params": {"x": math.nan}}, "params must be JSON"),
        ({"name": "noop", "params": {"x": math.inf}}, "params must be JSON"),
        ({"name": "noop", "params": {"x": "a\x00b"}}, "NUL"),
        ({"name": "noop", "params": {"x": "\ud800"}}, "surrogate"),
        ({"name": "noop", "params": {"x": "y" * 300_000}}, "limit"),
        ({"name": "noop", "queue": ""}, "queue name"),
        ({"name": "noop", "queue": 'a"; NOTIFY x'}, "queue name"),
        ({"name": "noop", "idempotency_key": "k" * 256}, "idempotencyKey"),
        ({"name": "noop", "singleton_key": ""}, "singletonKey"),
        ({"name": "noop", "idempotency_key": "a\x00b"}, "idempotencyKey must not contain NUL"),
        ({"name": "noop", "singleton_key": "a\udc80"}, "singletonKey .* lone surrogate"),
        ({"name": "noop", "concurrency_key": "\ud800x"}, "concurrencyKey .* lone surrogate"),
        ({"name": "noop", "delay_ms": -1}, "delayMs"),
        ({"name": "noop", "delay_ms": math.nan}, "delayMs"),
        ({"name": "noop", "priority": 10**12}, "priority"),
    ],
)
async def test_enqueue_rejects_bad_input_and_writes_nothing(
    store: Store, kwargs: dict[str, object], message: str
) -> None:
    engine = make_engine(store, noop)
    with pytest.raises(InvalidInputError, match=message):
        await engine.enqueue(**kwargs)  # type: ignore[arg-type]
    assert await _count(store, "instances") == 0
    assert await _count(store, "events") == 0


@pytest.mark.parametrize(
    ("concurrency", "rate", "message"),
    [
        (0, None, "concurrency"),
        (-3, None, "concurrency"),
        (1, -1.0, "ratePerMinute"),
        (1, 0.0, "ratePerMinute"),
        (1, math.nan, "ratePerMinute"),
    ],
)
async def test_configure_queue_rejects_bad_caps(
    store: Store, concurrency: int, rate: float | None, message: str
) -> None:
    engine = make_engine(store, noop)
    with pytest.raises(InvalidInputError, match=message):
        await engine.configure_queue("q", concurrency=concurrency, rate_per_minute=rate)
    assert await _count(store, "queues") == 0


# Found by an outside audit: any rate above 0 was accepted, and the claim's and the waiting
# reasons' arithmetic on a rate near the smallest double underflows or overflows in
# PostgreSQL, failing every claim round (of every queue) or every read of a waiting reason.
# The bounds are 0.0001 (about one start a week) and 10^9 a minute, each argument by itself.
@pytest.mark.parametrize("option", ["rate_per_minute", "key_rate_per_minute"])
@pytest.mark.parametrize("rate", [5e-324, 1e-310, 0.0001 * (1 - 1e-9), 1e9 * (1 + 1e-9), 1e308])
async def test_configure_queue_refuses_a_rate_outside_its_bounds(
    store: Store, option: str, rate: float
) -> None:
    engine = make_engine(store, noop)
    name = "ratePerMinute" if option == "rate_per_minute" else "keyRatePerMinute"
    with pytest.raises(InvalidInputError, match=rf"^{name} must be at least 0.0001 and at most"):
        await engine.configure_queue("q", concurrency=1, **{option: rate})  # type: ignore[arg-type]
    assert await _count(store, "queues") == 0


@pytest.mark.parametrize("rate", [0.0001, 1e9])
async def test_configure_queue_takes_a_rate_at_its_bounds(store: Store, rate: float) -> None:
    engine = make_engine(store, noop)
    record = await engine.configure_queue(
        "q", concurrency=1, rate_per_minute=rate, key_rate_per_minute=rate
    )
    assert (record.rate_per_minute, record.key_rate_per_minute) == (rate, rate)


async def test_list_rejects_limit_out_of_range(store: Store) -> None:
    engine = make_engine(store, noop)
    for limit in (0, 501):
        with pytest.raises(InvalidInputError, match="limit"):
            await engine.list_instances(limit=limit)


def test_workflow_definition_errors_are_clear() -> None:
    with pytest.raises(InvalidInputError, match="initial action"):
        Workflow("w", handlers={"a": _finish}, initial="b")
    with pytest.raises(InvalidInputError, match="workflow name"):
        Workflow("", handlers={"a": _finish}, initial="a")
    with pytest.raises(InvalidInputError, match="no handlers"):
        Workflow("w", handlers={}, initial="a")
    with pytest.raises(InvalidInputError, match="max_attempts"):
        RetryPolicy(max_attempts=0)


class Order(pydantic.BaseModel):
    sku: str
    quantity: int = pydantic.Field(gt=0)


async def test_pydantic_validator_rejects_bad_params_and_normalises_good_ones(
    store: Store,
) -> None:
    workflow = Workflow("order", handlers={"run": _finish}, initial="run", validator=Order)
    engine = make_engine(store, workflow)
    with pytest.raises(InvalidInputError, match="params rejected"):
        await engine.enqueue("order", {"sku": "a", "quantity": 0})
    created = await engine.enqueue("order", {"sku": "a", "quantity": "2"})
    assert created.instance.params == {"sku": "a", "quantity": 2}


async def test_callable_validator_rejects_bad_params(store: Store) -> None:
    def needs_name(params: object) -> object:
        if not isinstance(params, dict) or not isinstance(params.get("name"), str):
            raise ValueError("name must be a string")
        return params

    workflow = Workflow("named", handlers={"run": _finish}, initial="run", validator=needs_name)
    engine = make_engine(store, workflow)
    with pytest.raises(InvalidInputError, match="name must be a string"):
        await engine.enqueue("named", {"name": 5})
    assert (await engine.enqueue("named", {"name": "x"})).created


async def test_terminal_hook_runs_once_with_the_final_record(store: Store) -> None:
    seen: list[InstanceRecord] = []

    async def hook(record: InstanceRecord) -> None:
        seen.append(record)

    workflow = Workflow("hooked", handlers={"run": _finish}, initial="run", on_terminal=hook)
    engine = make_engine(store, workflow)
    done = await engine.enqueue("hooked")
    cancelled = await engine.enqueue("hooked", delay_ms=60_000)
    await engine.tick()
    await engine.cancel(cancelled.instance_id)
    await engine.cancel(cancelled.instance_id)  # a no-op: no second hook call
    assert [(r.instance_id, r.status) for r in seen] == [
        (done.instance_id, Status.COMPLETED),
        (cancelled.instance_id, Status.CANCELLED),
    ]


async def test_handler_progress_and_message_are_saved_with_the_checkpoint(store: Store) -> None:
    async def step(ctx: HandlerContext, params: object) -> Next:
        ctx.report(progress=0.5, message="half way")
        return Next("finish")

    workflow = Workflow(
        "progress",
        handlers={"step": step, "finish": _hold},
        initial="step",
        retry=RetryPolicy(max_attempts=1),
    )
    engine = make_engine(store, workflow)
    enqueued = await engine.enqueue("progress")
    await engine.tick()
    record = await engine.get(enqueued.instance_id)
    assert record is not None
    assert record.status == Status.FAILED  # `_hold` returns a bad step on purpose
    assert record.progress == 0.5
    assert record.message == "half way"
    assert record.last_error is not None
    assert "expected Next(...), Pause(...), Sleep(...), WaitForSignal(...) or Done(...)" in (
        record.last_error
    )


async def test_unknown_next_action_fails_the_attempt(store: Store) -> None:
    async def wrong(ctx: HandlerContext, params: object) -> Next:
        return Next("missing")

    workflow = Workflow(
        "wrong", handlers={"run": wrong}, initial="run", retry=RetryPolicy(max_attempts=1)
    )
    engine = make_engine(store, workflow)
    enqueued = await engine.enqueue("wrong")
    await engine.tick()
    record = await engine.get(enqueued.instance_id)
    assert record is not None
    assert record.status == Status.FAILED
    assert record.last_error == "InvalidInputError: handler 'run' returned unknown action 'missing'"


async def test_instance_of_unregistered_workflow_stays_pending_and_is_logged(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    producer = make_engine(store, noop)
    enqueued = await producer.enqueue("noop")
    other = Workflow("other", handlers={"run": _finish}, initial="run")
    consumer = make_engine(store, other)
    with caplog.at_level(logging.WARNING, logger="laneway.engine.claim_loop"):
        assert await consumer.tick() == 0
    record = await consumer.get(enqueued.instance_id)
    assert record is not None
    assert record.status == Status.PENDING
    warnings = [r for r in caplog.records if "not registered" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].workflow == "noop"  # type: ignore[attr-defined]


async def _finish(ctx: HandlerContext, params: object) -> Done:
    return Done()


async def _hold(ctx: HandlerContext, params: object) -> Done:
    return "not a step"  # type: ignore[return-value]
