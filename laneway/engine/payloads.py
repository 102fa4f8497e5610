"""JSON payloads (params, state, results): validation, encoding, decoding, size limits (pure).

Owns what may be stored as JSON, and as text, and how jsonb gives JSON back. PostgreSQL's jsonb
refuses NaN, Infinity, NUL characters and lone surrogates; they are refused here first, with a
clear error and no database call. Its text columns refuse NUL and lone surrogates too:
text_storable tells, and storable_text replaces them in what the engine writes on a user's
behalf.
"""

import json
import re
from collections.abc import Callable, Iterable
from decimal import Decimal

from laneway.errors import InvalidInputError
from laneway.model import JSONValue

MAX_PAYLOAD_BYTES = 256 * 1024
MAX_STATE_BYTES = 8 * 1024 * 1024

# One encoder for every call: json.dumps with options builds a new JSONEncoder each time,
# which was half the cost of encoding a small payload (a step's state, a result, params).
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
# And its C encoder, made once: JSONEncoder.encode makes one per call (with a dict to detect
# circular values), which was half of what encoding a template's state costs. Without that dict
# a circular value recurses until Python's recursion limit stops it (RecursionError, refused
# below like any other value that is not JSON). Absent on Pythons without the C accelerator.
_MakeEncoder = Callable[..., Callable[[object, int], Iterable[str]]]
_make_c_encoder: _MakeEncoder | None = getattr(json.encoder, "c_make_encoder", None)
_C_ENCODE = (
    None
    if _make_c_encoder is None
    else _make_c_encoder(
        None,  # markers: no circular check (see above)
        _ENCODER.default,
        json.encoder.encode_basestring_ascii,
        None,  # indent
        ":",  # key separator
        ",",  # item separator
        False,  # sort_keys
        False,  # skipkeys
        False,  # allow_nan
    )
)

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
        text = _ENCODER.encode(value) if _C_ENCODE is None else "".join(_C_ENCODE(value, 0))
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{what} must be JSON: {exc}") from None
    except RecursionError:
        raise InvalidInputError(
            f"{what} must be JSON: it refers to itself, or nests too deeply"
        ) from None
    if "\\u" in text and _BAD_ESCAPE.search(text):
        raise InvalidInputError(f"{what} holds a NUL character or a lone surrogate")
    size = json_size(text)
    if size > max_bytes:
        raise InvalidInputError(f"{what} is {size} bytes encoded; the limit is {max_bytes}")
    return text


def decode_json(text: str) -> JSONValue:
    """Encoded JSON `text` (encode_json's) as jsonb gives it back, without a database call: for
    what reaches a handler with no round trip (the runner's next params, laneway.testing), so
    that it sees what a run resumed from the database would.

    jsonb keeps an object's keys shortest first, then by their UTF-8 bytes, and a repeated
    key's last value; it holds a number as a numeric, written out in full: `1e20` comes back
    as `100000000000000000000` (an int to Python), `1e-07` as `0.0000001`, `1500.0` as it is,
    and `-0.0` as `0.0` (a numeric has no negative zero).
    """
    return json.loads(text, parse_float=_as_numeric, object_pairs_hook=_as_jsonb_object)


def _as_numeric(text: str) -> int | float:
    if "e" in text or "E" in text:
        text = format(Decimal(text), "f")
        if "." not in text:
            return int(text)
    return float(text) or 0.0  # -0.0 is falsy: jsonb gives it back as 0.0


def _as_jsonb_object(pairs: list[tuple[str, JSONValue]]) -> dict[str, JSONValue]:
    if len(pairs) < 2:
        return dict(pairs)
    merged = dict(pairs)  # a repeated key: its last value, as jsonb keeps
    return {key: merged[key] for key in sorted(merged, key=_jsonb_key_order)}


def _jsonb_key_order(key: str) -> tuple[int, bytes]:
    encoded = key.encode()
    return len(encoded), encoded


# A JSON string (skipped), or a number in exponent notation (measured).
_STRING_OR_EXPONENT = re.compile(r'"(?:[^"\\]|\\.)*"|(-?\d+(?:\.\d+)?[eE][+-]?\d+)')


def json_size(text: str) -> int:
    """The size of encoded JSON `text` as the limits count it: as jsonb holds it, and gives
    back. A number in exponent notation is stored as a numeric, written out in full (`1e308`
    is 309 digits), so a payload of such numbers is larger in the database, in a handler and
    in an answer than its text: each is counted at its full length, the rest of the text as
    it is."""
    size = len(text)
    if "e+" not in text and "e-" not in text:  # no float in exponent notation (the encoder's)
        return size
    for match in _STRING_OR_EXPONENT.finditer(text):
        number = match.group(1)
        if number is not None:
            size += len(format(Decimal(number), "f")) - len(number)
    return size


_SURROGATE = re.compile("[\ud800-\udfff]")


def text_storable(text: str) -> bool:
    """Whether a text column can hold `text` as it is: no NUL, no lone surrogate (a str holds
    a surrogate code point only on its own: decoded JSON and UTF-8 make pairs characters)."""
    return "\x00" not in text and (text.isascii() or _SURROGATE.search(text) is None)


def storable_text(text: str) -> str:
    """`text` as a text column can hold it: a NUL character and each lone surrogate become
    U+FFFD. For what the engine writes on a user's behalf that is not refused (an exception's
    message and traceback, an operation's reason, a reported status line): PostgreSQL would
    refuse the whole group commit it rides in, the other instances' writes with it."""
    if text_storable(text):
        return text
    return _SURROGATE.sub("\ufffd", text).replace("\x00", "\ufffd")


def json_copy(value: JSONValue) -> JSONValue:
    """A deep copy of a JSON value (its objects and arrays copied, the rest shared: immutable):
    what copy.deepcopy gives for JSON, without its memo, at a fraction of its cost."""
    if isinstance(value, dict):
        return {key: json_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [json_copy(item) for item in value]
    return value
