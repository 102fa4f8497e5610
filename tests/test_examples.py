"""The example workflows' params validators (pure): what `hello`, `countdown`, `flaky` accept."""

import pytest

from app.examples import check_countdown, check_flaky, check_hello, countdown, flaky, hello
from laneway.model import JSONValue


def test_examples_have_the_contract_names_and_retry_policy() -> None:
    assert (hello.name, countdown.name, flaky.name) == ("hello", "countdown", "flaky")
    assert (flaky.retry.max_attempts, flaky.retry.backoff, flaky.retry.base_ms) == (
        3,
        "fixed",
        100,
    )


def test_valid_params_pass_through() -> None:
    assert check_hello({"name": "Ann"}) == {"name": "Ann"}
    assert check_countdown({"n": 3, "delayMs": 10}) == {"n": 3, "delayMs": 10}
    assert check_flaky({"failTimes": 0}) == {"failTimes": 0}


@pytest.mark.parametrize(
    ("check", "params"),
    [
        (check_hello, None),
        (check_hello, {"name": ""}),
        (check_hello, {"name": 5}),
        (check_countdown, {"n": -1, "delayMs": 0}),
        (check_countdown, {"n": 1}),
        (check_countdown, {"n": True, "delayMs": 0}),
        (check_countdown, {"n": 1.5, "delayMs": 0}),
        (check_flaky, {"failTimes": "2"}),
        (check_flaky, [1]),
    ],
)
def test_bad_params_raise_value_error(check: object, params: JSONValue) -> None:
    assert callable(check)
    with pytest.raises(ValueError, match="must be"):
        check(params)
