"""strict_json_loads (laneway/api/http/strict_json.py): the numbers it takes and refuses. Pure.

A number is taken only when a float holds its value: one that overflows to infinity, or a
non-zero one that underflows to 0.0, would be stored as another value, and is refused alike.
A zero in any notation, negative zero included (stored as 0, to which it is equal), is taken.
An integer is taken up to the largest a double holds: `1e309` written out in digits is refused
as `1e309` is (an outside audit: 4,001 digits were stored).
"""

import json
import sys

import pytest

from laneway.api.http.strict_json import strict_json_loads


@pytest.mark.parametrize(
    "number",
    [
        "1e400",
        "-1e400",
        "1e-400",
        "-1e-400",
        "1E-400",
        "0.1e-330",
        "2e-324",
        "123e-500",
        "1" + "0" * 309,  # 1e309
        "-" + "9" * 400,
        str(2**1024),  # the first integer a double's rounding cannot reach
        "7" * 4300,  # CPython's digit limit, which it still reads
    ],
)
def test_a_number_a_float_cannot_hold_is_refused(number: str) -> None:
    with pytest.raises(json.JSONDecodeError, match="number out of range"):
        strict_json_loads('{"n": [' + number + "]}")


@pytest.mark.parametrize(
    ("number", "value"),
    [
        ("0.0", 0.0),
        ("-0.0", -0.0),
        ("0e400", 0.0),
        ("0.000e-999", 0.0),
        ("-0E+5", -0.0),
        ("5e-324", 5e-324),
        ("1e-300", 1e-300),
        ("1.5", 1.5),
        ("1e308", 1e308),
    ],
)
def test_a_number_a_float_holds_is_taken(number: str, value: float) -> None:
    assert strict_json_loads('{"n": ' + number + "}") == {"n": value}


@pytest.mark.parametrize(
    "value", [int(sys.float_info.max), -int(sys.float_info.max), 10**308, 2**53 + 1, -(10**20)]
)
def test_an_integer_a_double_holds_is_taken_as_written(value: int) -> None:
    assert strict_json_loads(f"[{value}]") == [value]
