"""Waits and review input: how long a wait may be, input schemas, and a wait's stored form.

Owns the checks of what a handler may ask to wait for (a sleep, a signal, a review checkpoint
with an input schema and an expiry), the validation of a resume's input against its schema
(with the `jsonschema` library, Draft 2020-12 unless the schema names another), and the JSON
that the group commit stores as the instance's `wait` (migrations/0016_waits.sql reads
`seconds` and `signal` from it; the wake-up reads `on_timeout`, `expiry` and `retry`). No I/O:
a schema's `$ref`s resolve within the schema itself, never by fetching a document. Every
jsonschema message that reaches a client (a refused input, a refused schema) is told through
problem_message, in JSON's spelling: clients send JSON, and jsonschema writes Python's.
"""

import json
from typing import Literal

import jsonschema
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema.exceptions import SchemaError, UnknownType, ValidationError
from referencing import Registry
from referencing.jsonschema import SchemaRegistry

from laneway.errors import InputRejectedError, InvalidInputError
from laneway.model import JSONValue

MAX_WAIT_SECONDS = 10 * 366 * 86_400.0  # about ten years: a timer, not a forever
MAX_REPORTED_PROBLEMS = 10  # a rejected input names at most this many failing paths
MAX_SCHEMA_BYTES = 64 * 1024
MAX_SHOWN_CHARS = 100  # a value a problem names, as JSON, is cut there
MAX_PROBLEM_CHARS = 500  # and so is the whole problem's message

ExpiryAction = Literal["resume", "cancel", "fail"]
EXPIRY_ACTIONS: tuple[ExpiryAction, ...] = ("resume", "cancel", "fail")


# Every validator is built on this empty registry, whose retrieval refuses every URI, so a
# schema's references resolve within the schema or not at all (a validator adds the
# meta-schemas jsonschema bundles; check_input_schema does not). jsonschema's default registry
# would urlopen another document, synchronously, inside the event loop: a schema naming a slow
# host would stall the whole process on each resume, and could make it reach any host.
NO_RETRIEVAL: SchemaRegistry = Registry()


def check_wait_seconds(seconds: float | None, what: str, *, optional: bool = False) -> None:
    """A wait's length: a number of seconds from 0 to about ten years (None where optional)."""
    if seconds is None and optional:
        return
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not 0 <= seconds <= MAX_WAIT_SECONDS
    ):
        raise InvalidInputError(
            f"{what} must be a number of seconds from 0 to {MAX_WAIT_SECONDS:.0f} (got {seconds!r})"
        )


def check_input_schema(schema: JSONValue, where: str) -> None:
    """A checkpoint's input schema: a valid JSON Schema object whose references resolve in it
    and do not loop without reading the input (`{"$ref": "#"}`: no input could pass)."""
    if not isinstance(schema, dict):
        raise InvalidInputError(f"{where}: input_schema must be a JSON Schema object")
    try:
        encoded = json.dumps(schema, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{where}: input_schema is not JSON: {exc}") from None
    if len(encoded.encode()) > MAX_SCHEMA_BYTES:
        raise InvalidInputError(f"{where}: input_schema is over {MAX_SCHEMA_BYTES} bytes")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        raise InvalidInputError(
            f"{where}: input_schema is not a valid JSON Schema: {problem_message(exc)}"
        ) from None
    unresolved = _unresolved_reference(schema)
    if unresolved is not None:
        keyword, ref = unresolved
        raise InvalidInputError(
            f"{where}: input_schema is not a valid JSON Schema: {_unresolved(keyword, ref)}"
        )
    # A loop that reads no input recurses whatever the input; one through properties or items
    # (a tree) stops at a value that has none, as these probes are.
    validator = jsonschema.validators.validator_for(schema)(schema, registry=NO_RETRIEVAL)
    probes: tuple[JSONValue, ...] = (None, {}, [])
    try:
        for probe in probes:
            for _ in validator.iter_errors(probe):
                pass
    except RecursionError:
        raise InvalidInputError(
            f"{where}: input_schema is not a valid JSON Schema: its references loop without"
            " reading the input, so no input could pass"
        ) from None


# The keywords that resolve a reference, of every draft; each draft's validator knows its own.
REFERENCE_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")


def _unresolved_reference(schema: dict[str, JSONValue]) -> tuple[str, str] | None:
    """The first reference (keyword, value) that does not resolve within the schema; None
    when all do. Checked where the schema is made, because a validator follows a reference
    only when the input reaches it: an unresolvable one would otherwise surface on some
    resume, long after, as a refusal no input can avoid.

    Walks the subschemas as the validator sees them (their `$id`s move the base a reference
    resolves against) with the registry every validator uses, so that a reference this
    accepts is one that validation resolves without fetching anything.
    """
    validator = jsonschema.validators.validator_for(schema)
    # Each bundled meta-schema's $schema is its own dialect: the draft the validator applies.
    dialect = str(validator.META_SCHEMA.get("$schema", ""))
    specification = referencing.jsonschema.specification_with(
        dialect, default=referencing.Specification.OPAQUE
    )
    root = specification.create_resource(schema)
    keywords = [keyword for keyword in REFERENCE_KEYWORDS if keyword in validator.VALIDATORS]
    pending = [(NO_RETRIEVAL.resolver_with_root(root), root)]
    while pending:
        resolver, resource = pending.pop()
        contents = resource.contents
        if isinstance(contents, dict):
            for keyword in keywords:
                ref = contents.get(keyword)
                if not isinstance(ref, str):
                    continue
                try:
                    resolver.lookup(ref)
                except referencing.exceptions.Unresolvable:
                    return keyword, ref
        pending.extend((resolver.in_subresource(sub), sub) for sub in resource.subresources())
    return None


def validate_input(schema: JSONValue, value: JSONValue, *, label: str | None) -> None:
    """Check a resume's input against the checkpoint's schema (None: any input goes).

    Raises:
        InputRejectedError: the input does not match; names every failing path (at most ten),
            the most relevant first. Also when the schema cannot be used to check it (a
            reference that does not resolve within the schema, as one paused by a release
            that did not check them may hold; a reference that loops): the instance stays
            paused, as for any refused input, and a bulk resume leaves it so.
    """
    if schema is None:
        return
    where = f"checkpoint {label!r}" if label else "the checkpoint"
    validator = jsonschema.validators.validator_for(schema)(schema, registry=NO_RETRIEVAL)
    try:
        errors = sorted(validator.iter_errors(value), key=jsonschema.exceptions.relevance)
    except (referencing.exceptions.Unresolvable, UnknownType, RecursionError) as exc:
        raise _unusable(where, exc) from None
    if not errors:
        return
    problems = [
        (error.json_path, problem_message(error)) for error in errors[:MAX_REPORTED_PROBLEMS]
    ]
    path, message = problems[0]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    raise InputRejectedError(
        f"input rejected by the input schema of {where} at {path}: {message}{more}", problems
    )


def shown(value: object) -> str:
    """A value as a problem names it: its JSON (`null`, `true`, `"text"`), not Python's spelling
    (`None`, `True`, `'text'`), cut to MAX_SHOWN_CHARS."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):  # a handler's default input, not JSON
        text = repr(value)
    return text if len(text) <= MAX_SHOWN_CHARS else text[: MAX_SHOWN_CHARS - 1] + "…"


# Keywords whose message names properties (missing, depended on, unexpected) and not the value.
_NAMING_KEYWORDS = frozenset(
    (
        "required",
        "dependentRequired",
        "dependencies",
        "additionalProperties",
        "unevaluatedProperties",
    )
)


def problem_message(error: ValidationError | SchemaError) -> str:
    """jsonschema's message of `error`, with the values it names in JSON's spelling (shown).

    jsonschema writes them with repr: `None is not of type 'object'`, `'maybe' is not one of
    ['approve', 'reject']`, and the whole of a large value. The common keywords are said again
    here with shown; any other keeps jsonschema's words, with the value it starts with (most
    do) as JSON, and the message is cut to MAX_PROBLEM_CHARS.
    """
    keyword: object = error.validator  # None for a schema that is `false` (typed str)
    expected, value = error.validator_value, shown(error.instance)
    if keyword is None:
        message = f"False schema does not allow {value}"
    elif keyword == "type":
        types = expected if isinstance(expected, list) else [expected]
        message = f"{value} is not of type {', '.join(shown(each) for each in types)}"
    elif keyword == "enum":
        message = f"{value} is not one of {shown(expected)}"
    elif keyword == "const":
        message = f"{shown(expected)} was expected"
    elif keyword == "pattern":
        message = f"{value} does not match {shown(expected)}"
    elif keyword == "not":
        message = f"{value} should not be valid under {shown(expected)}"
    elif keyword in _NAMING_KEYWORDS:
        message = error.message
        for name in sorted(_names(error), key=len, reverse=True):
            message = message.replace(repr(name), shown(name))
    else:
        message = error.message
        spelled = repr(error.instance)
        if message.startswith(spelled):
            message = value + message[len(spelled) :]
    if len(message) > MAX_PROBLEM_CHARS:
        message = message[: MAX_PROBLEM_CHARS - 1] + "…"
    return message


def _names(error: ValidationError | SchemaError) -> set[str]:
    """The property names a naming keyword's message may hold: the keyword's own (required
    ones, dependencies), the value's keys, and the patterns of patternProperties."""
    expected, schema = error.validator_value, error.schema
    found: list[object] = []
    if isinstance(expected, list):
        found.extend(expected)
    elif isinstance(expected, dict):
        found.extend(expected)
        for listed in expected.values():
            found.extend(listed if isinstance(listed, list) else ())
    if isinstance(error.instance, dict):
        found.extend(error.instance)
    if isinstance(schema, dict) and isinstance(schema.get("patternProperties"), dict):
        found.extend(schema["patternProperties"])
    return {name for name in found if isinstance(name, str)}


def _unusable(where: str, exc: Exception) -> InputRejectedError:
    """The refusal of an input that the checkpoint's schema could not check: said as such,
    not masked as an internal error, and with nothing of the schema's text (it can be long)."""
    if isinstance(exc, referencing.exceptions.Unresolvable):
        reason = _unresolved("reference", exc.ref)
    elif isinstance(exc, UnknownType):
        reason = f"it names the unknown type {exc.type!r}"
    else:
        reason = "checking this input recursed too deeply (a reference that loops, or an input"
        reason += " nested too deeply for the schema)"
    return InputRejectedError(
        f"input rejected: the input schema of {where} cannot be used: {reason}", [("$", reason)]
    )


def _unresolved(keyword: str, ref: str) -> str:
    local = ref.startswith(("#", "/"))  # a JSON pointer or anchor within the schema
    never = "" if local else " (a reference to another document is never fetched)"
    return f"its {keyword} {ref!r} does not resolve within the schema{never}"


def check_expiry(then: str, default_input: JSONValue, schema: JSONValue, where: str) -> None:
    """What a checkpoint's expiry does: resume (with an input its schema accepts), cancel, fail."""
    if then not in EXPIRY_ACTIONS:
        raise InvalidInputError(f"{where}: on_expiry must be one of {', '.join(EXPIRY_ACTIONS)}")
    if then == "resume":
        try:
            validate_input(schema, default_input, label=None)
        except InputRejectedError as exc:
            raise InvalidInputError(
                f"{where}: the expiry's default input does not match: {exc}"
            ) from None
    elif default_input is not None:
        raise InvalidInputError(f"{where}: only an expiry that resumes takes an input")


def with_retry(wait: dict[str, JSONValue], action: str, params: JSONValue) -> dict[str, JSONValue]:
    """A wait that can fail the instance when its time comes (a signal wait with a timeout and
    no on_timeout, a checkpoint whose expiry fails) keeps the handler that asked for it and its
    params, so that retryWorkflow runs that handler again, which waits again, instead of going
    on as if the signal or the review had come."""
    expiry = wait.get("expiry")
    fails = (
        wait.get("kind") == "signal"
        and wait.get("seconds") is not None
        and wait.get("on_timeout") is None
    ) or (isinstance(expiry, dict) and expiry.get("then") == "fail")
    return {**wait, "retry": {"action": action, "params": params}} if fails else wait


def sleep_wait(seconds: float) -> dict[str, JSONValue]:
    return {"kind": "sleep", "seconds": float(seconds)}


def signal_wait(
    signal: str, timeout_seconds: float | None, on_timeout: str | None
) -> dict[str, JSONValue]:
    return {
        "kind": "signal",
        "signal": signal,
        "seconds": None if timeout_seconds is None else float(timeout_seconds),
        "on_timeout": on_timeout,
    }


def check_max_input_bytes(value: int | None, where: str) -> None:
    """A checkpoint's max_input_bytes: None (no bound but the params limit), or a count."""
    if value is not None and (type(value) is not int or value < 0):
        raise InvalidInputError(f"{where}: max_input_bytes must be an int >= 0, or None")


def property_order(input_schema: JSONValue) -> dict[str, JSONValue]:
    """The author's order of the schema's properties, kept beside it in the wait.

    jsonb orders an object's keys by length, and the dashboard's form lists them in the order
    it gets them. The schema itself stays an object, as 0.3.5 reads it (and ignores this key).
    """
    if not isinstance(input_schema, dict):
        return {}
    properties = input_schema.get("properties")
    if not isinstance(properties, dict) or len(properties) < 2:
        return {}
    return {"input_schema_order": list(properties)}


def checkpoint_wait(
    input_schema: JSONValue,
    timeout_seconds: float | None,
    then: str | None,
    default_input: JSONValue,
    max_input_bytes: int | None = None,
) -> dict[str, JSONValue] | None:
    """A pause's wait: its input schema, size bound and expiry; None for a plain pause
    (nothing to keep)."""
    if input_schema is None and timeout_seconds is None and max_input_bytes is None:
        return None
    bound: dict[str, JSONValue] = (
        {} if max_input_bytes is None else {"max_input_bytes": max_input_bytes}
    )
    return {
        "kind": "checkpoint",
        "input_schema": input_schema,
        **property_order(input_schema),
        **bound,
        "seconds": None if timeout_seconds is None else float(timeout_seconds),
        "expiry": None
        if timeout_seconds is None
        else {"then": then or "fail", "input": default_input},
    }
