"""Retry delays and JSON payload rules (pure)."""

import pytest

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
