"""Retry delays and JSON payload rules (pure)."""

import json
import sys

import pytest

from laneway.engine import payloads
from laneway.engine.backoff import retry_delay_ms
from laneway.engine.payloads import encode_json
from laneway.errors import InvalidInputError


@pytest.mark.parametrize(
    ("kind", "attempt", "expected"),
    [
        ("fixed", 1, 100.0),
        ("fixed", 7, 100.0),
        ("exponential", 1, 100.0),
        ("exponential", 2, 200.0),
        ("exponential", 4, 800.0),
        ("exponential", 5, 1000.0),
        ("exponential", 10_000, 1000.0),
    ],
)
def test_retry_delay_is_capped(kind: str, attempt: int, expected: float) -> None:
    assert retry_delay_ms(kind, 100.0, 1000.0, attempt) == expected  # type: ignore[arg-type]


def test_retry_delay_refuses_attempt_zero() -> None:
    with pytest.raises(ValueError, match="1-based"):
        retry_delay_ms("fixed", 1, 1, 0)


@pytest.mark.parametrize(
    "value", [{"a": 1}, [1, "two", None, True], "é", "\ud83d\ude00", {"k": "\\u0000 literal"}]
)
def test_encode_json_accepts_json_values(value: object) -> None:
    assert encode_json(value, what="params")


@pytest.mark.parametrize(
    "value", [float("nan"), {"a": float("-inf")}, "\x00", {"a": "\udfff"}, {1j: 2}, object()]
)
def test_encode_json_refuses_what_postgres_cannot_store(value: object) -> None:
    with pytest.raises(InvalidInputError):
        encode_json(value, what="params")


@pytest.mark.parametrize(
    "value",
    [
        {"initial_context": {"i": 1}, "context": {"i": 1, "x": [1.5, None]}, "stages_done": 2},
        ["é", {"nested": {"deep": [True, False, -0.0, 10**30]}}],
        {1: "int key", False: "bool key", None: "null key", 2.5: "float key"},
        "plain",
        7,
    ],
)
@pytest.mark.parametrize("accelerated", [True, False])
def test_encode_json_writes_what_json_dumps_writes(
    value: object, accelerated: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The C encoder made once (or, without it, the JSONEncoder) writes each value exactly as
    # the standard library's json.dumps would.
    if not accelerated:
        monkeypatch.setattr(payloads, "_C_ENCODE", None)
    assert encode_json(value, what="state") == json.dumps(
        value, allow_nan=False, separators=(",", ":")
    )


def test_encode_json_refuses_a_value_that_contains_itself() -> None:
    circular: dict[str, object] = {}
    circular["self"] = [circular]
    with pytest.raises(InvalidInputError, match="state must be JSON: it refers to itself"):
        encode_json(circular, what="state")
    # Nothing is left behind: the next value encodes as usual.
    assert encode_json({"after": 1}, what="state") == '{"after":1}'


def test_encode_json_refuses_a_value_nested_past_the_recursion_limit() -> None:
    deep: list[object] = []
    for _ in range(sys.getrecursionlimit() + 10):
        deep = [deep]
    with pytest.raises(InvalidInputError, match="nests too deeply"):
        encode_json(deep, what="params")
