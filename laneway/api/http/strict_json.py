"""strict_json_loads: JSON as the API accepts it, for bodies, websocket frames and CLI input.

Owns the rules Python's json module is laxer about: no NaN or Infinity, no duplicate keys, no
nesting deeper than MAX_JSON_DEPTH, no integers longer than CPython's own digit limit, no
numbers that overflow to infinity or underflow to 0.0, which would change their value, and no
integer larger than a double holds (a client that reads numbers as doubles, as JavaScript
does, could not read it back: `1e309` written out is refused as `1e309` is). Pure:
text in, a value or json.JSONDecodeError out.
"""

import json
import math
import sys
from typing import Any

MAX_JSON_DEPTH = 64
ENVELOPE_DEPTH = 8
"""Levels a request may wrap around an argument's JSON value (the body, `variables`, a list
and an input object, a websocket frame's `payload`): a body or frame may nest this much deeper
than a value, so that the argument guard, whose refusal names the argument, decides how deep
a value is, the same for a variable as for a literal."""
MAX_REQUEST_DEPTH = MAX_JSON_DEPTH + ENVELOPE_DEPTH
MAX_INT_DIGITS = 4300  # CPython's own int_max_str_digits default
_DOUBLE_INT_DIGITS = len(str(int(sys.float_info.max)))  # 309: fewer always fit a double


def parse_refusal(exc: ValueError, what: str) -> str:
    """The message of a 400 for JSON that `strict_json_loads` refused: which of its rules
    `what` (the request body, a query parameter) broke, or where its syntax went wrong."""
    if isinstance(exc, UnicodeDecodeError):
        reason = "it is not valid UTF-8"
    elif isinstance(exc, json.JSONDecodeError) and exc.pos == 0:
        reason = exc.msg  # one of the rules above (they name no position), or an empty text
    else:
        reason = str(exc)
    return f"Unable to parse {what} as JSON: {reason}"


def _reject_constant(name: str) -> object:
    raise ValueError("NaN and Infinity are not JSON")


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError("integer too long")
    if int_out_of_range(text):
        raise ValueError("number out of range")
    return int(text)


def int_out_of_range(text: str) -> bool:
    """True when the integer written `text` is beyond what a double holds (its float would
    overflow, as `1e309`'s does). Read only when it has the digits to be: 309 or more."""
    digits = len(text.lstrip("-"))
    if digits < _DOUBLE_INT_DIGITS:
        return False
    if digits > MAX_INT_DIGITS:
        return True  # CPython would not read it
    try:
        float(int(text))
    except OverflowError:
        return True
    return False


def out_of_range(text: str, value: float) -> bool:
    """True when `value`, the float of the number written `text`, is not that number's value:
    it overflowed to infinity, or a non-zero number underflowed to 0.0 (`1e-400`). A zero in
    any notation (`-0.0`, `0e400`) is in range. The digits are read only for a 0.0."""
    if value == 0.0:
        return text.lower().partition("e")[0].strip("-+0.") != ""  # a digit not 0
    return math.isinf(value)


def _parse_float(text: str) -> float:
    value = float(text)
    if out_of_range(text, value):
        raise ValueError("number out of range")
    return value


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ValueError("duplicate object key")
    return result


def _depth_exceeds(value: object, limit: int) -> bool:
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def strict_json_loads(data: str | bytes, *, max_depth: int = MAX_JSON_DEPTH) -> object:
    """Decode JSON, refusing what Python's json accepts but JSON (or we) do not.

    Refused: NaN/Infinity, duplicate keys, nesting deeper than `max_depth` (a value: 64; a
    request body or frame: MAX_REQUEST_DEPTH), integers longer than 4300 digits, and numbers
    that overflow to infinity or, not zero, underflow to 0.0 (out_of_range).

    Raises:
        json.JSONDecodeError: for any of those, or malformed JSON.
    """
    text = data.decode("utf-8", errors="strict") if isinstance(data, bytes) else data
    try:
        value = json.loads(
            text,
            parse_constant=_reject_constant,
            parse_int=_parse_int,
            parse_float=_parse_float,
            object_pairs_hook=_unique_keys,
        )
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", text, 0) from None
    except ValueError as exc:
        raise json.JSONDecodeError(str(exc), text, 0) from None
    # Counting brackets first spares the walk for every ordinary body.
    if text.count("[") + text.count("{") > max_depth and _depth_exceeds(value, max_depth):
        raise json.JSONDecodeError(f"nested deeper than {max_depth}", text, 0)
    return value
