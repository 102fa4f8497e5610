"""store/key_order.py: the order a batch enqueue inserts its rows in (pure, no database)."""

import random

import pytest

from laneway.engine.requests import new_instance_id
from laneway.model import NewInstance
from laneway.store.key_order import in_lock_order, repeated_keys


def _new(
    idempotency_key: str | None = None, singleton_key: str | None = None, name: str = "w"
) -> NewInstance:
    return NewInstance(
        instance_id=new_instance_id(),
        name=name,
        queue="default",
        priority=0,
        max_attempts=1,
        delay_ms=0.0,
        params_json="{}",
        first_action="run",
        idempotency_key=idempotency_key,
        singleton_key=singleton_key,
    )


def _keys(batch: list[NewInstance]) -> list[tuple[str | None, str, str | None]]:
    return [(new.idempotency_key, new.name, new.singleton_key) for new in batch]


@pytest.mark.parametrize("seed", range(5))
def test_batches_of_the_same_keys_in_any_order_go_in_in_one_order(seed: int) -> None:
    batch = [_new(f"k{i}") for i in range(20)] + [_new(None, f"s{i}") for i in range(5)]
    batch += [_new(None, "s0", name="other"), _new()]
    shuffled = random.Random(seed).sample(batch, len(batch))
    assert _keys(in_lock_order(shuffled)) == _keys(in_lock_order(batch))
    # Idempotency keys first, in order; then workflow and singleton key; keyless rows last.
    ordered = _keys(in_lock_order(batch))
    assert ordered[:20] == sorted(ordered[:20], key=lambda k: k[0] or "")
    assert ordered[20:26] == [(None, "other", "s0")] + [(None, "w", f"s{i}") for i in range(5)]
    assert ordered[26] == (None, "w", None)


def test_requests_sharing_a_key_keep_their_request_order_where_the_first_sorts() -> None:
    # z shares singleton s with y, and y idempotency key "c" with x: one group, headed by z.
    z, y, x = _new("z", "s"), _new("c", "s"), _new("c")
    a, m = _new("a"), _new("m")
    assert in_lock_order([z, m, y, a, x]) == [a, m, z, y, x]


def test_a_batch_with_nothing_to_conflict_on_keeps_its_order() -> None:
    batch = [_new() for _ in range(5)]
    assert in_lock_order(batch) == batch


def test_a_request_repeating_an_earlier_ones_idempotency_key_is_its_repeat() -> None:
    batch = [_new("a", "s"), _new("b"), _new(None, "s"), _new("a"), _new("b", "t"), _new("a")]
    first_a, first_b = batch[0].instance_id, batch[1].instance_id
    assert repeated_keys(batch) == {
        batch[3].instance_id: first_a,
        batch[4].instance_id: first_b,
        batch[5].instance_id: first_a,
    }
    assert repeated_keys([_new(), _new(None, "s"), _new("x")]) == {}
