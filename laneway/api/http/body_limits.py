"""RequestLimits: what a /graphql request body may be — its media type, its size, strict JSON,
a JSON object, one operation.

Owns the pure ASGI middleware that reads a body once, before Strawberry sees it. Everything it
rejects is answered with a 4xx and a small JSON body; nothing here may ever end in a 500. The
decoded body is left in the scope under DECODED_BODY for the rate limiter, so a body is decoded
once, and its document goes through the shared parse cache (graphql/documents.py). The JSON
rules themselves are strict_json.py's; the wall clock is deadline.py's.
"""

import json
import logging
from typing import Any

from laneway.api.graphql.documents import operation_refusal
from laneway.api.graphql.errors import BAD_REQUEST, OPERATION_RESOLUTION_FAILURE
from laneway.api.http.asgi import ASGIApp, Message, Receive, Scope, Send, route_path
from laneway.api.http.refusals import send_error
from laneway.api.http.strict_json import MAX_REQUEST_DEPTH, parse_refusal, strict_json_loads

logger = logging.getLogger(__name__)


MAX_BODY_BYTES = 1024 * 1024
TOO_LARGE = "Request body too large."
DECODED_BODY = "laneway.decoded_body"
# A 413 leaves the rest of the body unread: the connection closes with it, or the server would
# wait for that body (until its body timeout) before it could read the next request.
CLOSE = ((b"connection", b"close"),)
_JSON_KINDS = ((str, "a string"), (bool, "a boolean"), ((int, float), "a number"))


def not_an_object(body: object) -> str | None:
    """Why a decoded JSON body is not a GraphQL request (None when it is an object)."""
    if isinstance(body, dict):
        return None
    if isinstance(body, list):
        return "Batching is not enabled: the request body must be a JSON object, not an array."
    kind = next((name for types, name in _JSON_KINDS if isinstance(body, types)), "null")
    return f"The request body must be a JSON object, not {kind}."


def request_refusal(body: dict[str, Any], max_tokens: int) -> tuple[str, str] | None:
    """Why a request object names no operation to run, and its code, or None: an
    `operationName` that is neither a string nor null (BAD_REQUEST: Strawberry checks the
    other members, but would look it up as it came), or a document without the operation it
    names, or with several and no name (OPERATION_RESOLUTION_FAILURE:
    documents.operation_refusal; Strawberry would run the first)."""
    query, name = body.get("query"), body.get("operationName")
    if name is not None and not isinstance(name, str):
        message = "The GraphQL operation's `operationName` must be a string or null, if provided."
        return message, BAD_REQUEST
    if not isinstance(query, str):
        return None  # Strawberry's own message
    refusal = operation_refusal(query, name, max_tokens)
    return None if refusal is None else (refusal, OPERATION_RESOLUTION_FAILURE)


def unreadable(scope: Scope) -> tuple[str, tuple[bytes, bytes]] | None:
    """Why a POST body cannot be read here, with the response header that says what can be
    (RFC 9110's 415), or None: a media type other than application/json, or none; a charset
    other than UTF-8, which strict_json would decode as UTF-8 all the same; or a content
    coding (gzip, …), which nothing here undoes. Multipart uploads are off in Laneway's view.
    """
    content_type = encoding = b""
    for key, value in scope["headers"]:
        if key == b"content-type" and not content_type:
            content_type = value
        elif key == b"content-encoding":
            encoding += b"," + value
    media, *parameters = content_type.decode("latin-1").split(";")
    if media.strip().lower() != "application/json":
        message = "Unsupported content type: the request body must be application/json."
        return message, (b"accept", b"application/json")
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset" and value.strip().strip('"').lower() != "utf-8":
            message = "Unsupported charset: the request body must be JSON in UTF-8."
            return message, (b"accept", b"application/json")
    codings = {c.strip().lower() for c in encoding.decode("latin-1").split(",")} - {"", "identity"}
    if codings:
        message = "Unsupported content encoding: the request body must not be compressed."
        return message, (b"accept-encoding", b"identity")
    return None


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
    """Pure ASGI middleware guarding POST bodies on `path`.

    `check_operations` False leaves request_refusal, which parses the document, to RateLimits,
    which charges the request first (stack.py): a refusal here would parse for free.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        path: str = "/graphql",
        max_body_bytes: int = MAX_BODY_BYTES,
        max_tokens: int = 2000,
        check_operations: bool = True,
    ) -> None:
        self.app = app
        self.path = path
        self.max_body_bytes = max_body_bytes
        self.max_tokens = max_tokens
        self.check_operations = check_operations

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or route_path(scope).rstrip("/") != self.path:
            await self.app(scope, receive, send)
            return
        length = _content_length(scope)
        if length is not None and length > self.max_body_bytes:
            await send_error(scope, send, 413, TOO_LARGE, BAD_REQUEST, CLOSE)
            return
        if scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        unsupported = unreadable(scope)
        if unsupported is not None:
            message, header = unsupported
            await send_error(scope, send, 415, message, BAD_REQUEST, [header])
            return
        try:
            body = await _read_body(receive, self.max_body_bytes)
        except BodyTooLargeError:
            await send_error(scope, send, 413, TOO_LARGE, BAD_REQUEST, CLOSE)
            return
        try:
            decoded = strict_json_loads(body, max_depth=MAX_REQUEST_DEPTH)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            why = parse_refusal(exc, "the request body")
            await send_error(scope, send, 400, why, BAD_REQUEST)
            return
        refusal = not_an_object(decoded)
        refused = None if refusal is None else (refusal, BAD_REQUEST)
        if refused is None and isinstance(decoded, dict) and self.check_operations:
            refused = request_refusal(decoded, self.max_tokens)
        if refused is not None:
            await send_error(scope, send, 400, *refused)
            return
        scope[DECODED_BODY] = decoded
        await self.app(scope, _replay(body, receive), send)


def _content_length(scope: Scope) -> int | None:
    for key, value in scope["headers"]:
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


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
