"""Request limits in front of /graphql: body size, strict JSON, one operation per document,
and the operation wall clock.

Owns RequestLimits and OperationDeadline, pure ASGI middlewares, and `strict_json_loads`,
which the GraphQL view also uses for websocket frames and GET variables. Everything
RequestLimits rejects is answered with a 4xx and a small JSON body before Strawberry sees it;
nothing here may ever end in a 500. The decoded body is left in the scope under DECODED_BODY
for the rate limiter, so a body is parsed once.
"""

import asyncio
import json
import logging
import math
from typing import Any

from graphql import GraphQLError, OperationDefinitionNode, parse

from laneway.api.graphql.errors import TIMEOUT, send_error
from laneway.api.http.asgi import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger(__name__)


MAX_BODY_BYTES = 1024 * 1024
MAX_JSON_DEPTH = 64
MAX_INT_DIGITS = 4300  # CPython's own int_max_str_digits default
PARSE_ERROR = "Unable to parse request body as JSON"
DECODED_BODY = "laneway.decoded_body"
NEED_OPERATION_NAME = "Must provide operation name if query contains multiple operations."


def _reject_constant(name: str) -> object:
    raise ValueError("NaN and Infinity are not JSON")


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError("integer too long")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
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


def strict_json_loads(data: str | bytes) -> object:
    """Decode JSON, refusing what Python's json accepts but JSON (or we) do not.

    Refused: NaN/Infinity, duplicate keys, nesting deeper than 64, integers longer than
    4300 digits, and numbers that overflow to infinity.

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
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and _depth_exceeds(value, MAX_JSON_DEPTH):
        raise json.JSONDecodeError(f"nested deeper than {MAX_JSON_DEPTH}", text, 0)
    return value


def has_several_unnamed_operations(body: object, max_tokens: int) -> bool:
    """True when a request's document holds several operations and names none of them.

    A document that does not parse is left to Strawberry, which reports the syntax error.
    """
    if not isinstance(body, dict) or body.get("operationName") is not None:
        return False
    query = body.get("query")
    if not isinstance(query, str) or query.count("{") < 2:
        return False
    try:
        document = parse(query, no_location=True, max_tokens=max_tokens)
    except GraphQLError:
        return False
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    return len(operations) > 1


class BodyTooLargeError(Exception):
    """The request body is larger than the limit."""


async def _read_body(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


class RequestLimits:
    """Pure ASGI middleware guarding POST bodies on `path`."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        path: str = "/graphql",
        max_body_bytes: int = MAX_BODY_BYTES,
        max_tokens: int = 2000,
    ) -> None:
        self.app = app
        self.path = path
        self.max_body_bytes = max_body_bytes
        self.max_tokens = max_tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].rstrip("/") != self.path:
            await self.app(scope, receive, send)
            return
        length = _content_length(scope)
        if length is not None and length > self.max_body_bytes:
            await send_error(send, 413, "Request body too large.")
            return
        if scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        try:
            body = await _read_body(receive, self.max_body_bytes)
        except BodyTooLargeError:
            await send_error(send, 413, "Request body too large.")
            return
        if _is_json(scope):
            try:
                parsed = strict_json_loads(body)
            except (json.JSONDecodeError, UnicodeDecodeError):
                await send_error(send, 400, PARSE_ERROR)
                return
            if has_several_unnamed_operations(parsed, self.max_tokens):
                await send_error(send, 400, NEED_OPERATION_NAME)
                return
            scope[DECODED_BODY] = parsed
        await self.app(scope, _replay(body, receive), send)


def _content_length(scope: Scope) -> int | None:
    for key, value in scope["headers"]:
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _is_json(scope: Scope) -> bool:
    for key, value in scope["headers"]:
        if key == b"content-type":
            return bool(value.split(b";")[0].strip().lower() == b"application/json")
    return False


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive callable that hands the buffered body over once, then defers to the client."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class OperationDeadline:
    """Pure ASGI middleware: a GraphQL request on `path` must answer within `seconds`.

    Past the deadline the request is cancelled (its transaction rolls back) and answered
    504 with code TIMEOUT. Once the response has started the clock stops, so streamed
    subscriptions are exempt. `seconds` 0 turns the deadline off.
    """

    def __init__(self, app: ASGIApp, *, seconds: float, path: str = "/graphql") -> None:
        self.app = app
        self.seconds = seconds
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].rstrip("/") != self.path or not self.seconds:
            await self.app(scope, receive, send)
            return
        started = False
        deadline = asyncio.timeout(self.seconds)

        async def timed_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                deadline.reschedule(None)
            await send(message)

        try:
            async with deadline:
                await self.app(scope, receive, timed_send)
        except TimeoutError:
            if started or not deadline.expired():
                raise
            logger.warning("operation timed out", extra={"seconds": self.seconds})
            await send_error(
                send, 504, f"The operation took longer than {self.seconds:g} s.", TIMEOUT
            )
