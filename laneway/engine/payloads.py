"""JSON payloads (params, state, results): validation, encoding and size limits (pure).

Owns what may be stored as JSON. PostgreSQL's jsonb refuses NaN, Infinity, NUL characters and
lone surrogates; they are refused here first, with a clear error and no database call.
"""

import json
import re

from laneway.errors import InvalidInputError
from laneway.model import JSONValue

MAX_PAYLOAD_BYTES = 256 * 1024
MAX_STATE_BYTES = 8 * 1024 * 1024

# One encoder for every call: json.dumps with options builds a new JSONEncoder each time,
# which was half the cost of encoding a small payload (a step's state, a result, params).
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))

_CONSTANT_TEXT: dict[type, str] = {type(None): "null", dict: "{}", list: "[]"}

# A \u0000 escape, or a surrogate escape that is not part of a high+low pair.
_BAD_ESCAPE = re.compile(
    r"(?<!\\)(?:\\\\)*\\u(?:0000|d[89ab][0-9a-f]{2}(?!\\ud[c-f][0-9a-f]{2})"
    r"|(?<!\\ud[89ab][0-9a-f]{2}\\u)d[c-f][0-9a-f]{2})",
    re.IGNORECASE,
)


def encode_json(value: JSONValue, *, what: str, max_bytes: int = MAX_PAYLOAD_BYTES) -> str:
    """Encode a value for a jsonb column.

    Raises:
        InvalidInputError: the value is not JSON, holds NaN/Infinity, a NUL character or a
            lone surrogate, or is larger than `max_bytes` once encoded.
    """
    if value is None or (type(value) in (dict, list) and not value):
        return _CONSTANT_TEXT[type(value)]  # null, {} and []: what most operations return
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{what} must be JSON: {exc}") from None
    if "\\u" in text and _BAD_ESCAPE.search(text):
        raise InvalidInputError(f"{what} holds a NUL character or a lone surrogate")
    if len(text) > max_bytes:
        raise InvalidInputError(f"{what} is {len(text)} bytes encoded; the limit is {max_bytes}")
    return text


def json_copy(value: JSONValue) -> JSONValue:
    """A deep copy of a JSON value (its objects and arrays copied, the rest shared: immutable):
    what copy.deepcopy gives for JSON, without its memo, at a fraction of its cost."""
    if isinstance(value, dict):
        return {key: json_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [json_copy(item) for item in value]
    return value
