"""Refusals: the HTTP answer to a request refused before any GraphQL ran, framed in one place.

Owns the headers of such an answer and, decided here and nowhere else, its media type: the one
the client prefers (media_type.answered_media_type), as every answer has (docs/limits.md). A
middleware's refusal (400, 405, 413, 415, 429, 503, 504), a websocket handshake's refusal and
the server's own answer to a request it will not parse (server.py) all take it from here, so
none can answer application/json to a client that asked for application/graphql-response+json.
Does not decide whether to refuse (each layer does) or the document's shape (error_body).
"""

from collections.abc import Iterable, Mapping

from laneway.api.graphql.errors import error_body
from laneway.api.http.asgi import Scope, Send
from laneway.api.http.media_type import answered_media_type

Headers = list[tuple[bytes, bytes]]


def refusal_headers(
    scope: Scope | None, body: bytes, headers: Iterable[tuple[bytes, bytes]] = ()
) -> Headers:
    """The headers of an error document `body` answering the request of `scope`: its
    Content-Type (the media type the request's Accept prefers; application/json without a
    scope, before any header was read), its Content-Length, then `headers`."""
    media_type = "application/json" if scope is None else answered_media_type(scope)
    return [
        (b"content-type", media_type.encode()),
        (b"content-length", str(len(body)).encode()),
        *headers,
    ]


async def send_error(
    scope: Scope,
    send: Send,
    status: int,
    message: str,
    code: str,
    headers: Iterable[tuple[bytes, bytes]] = (),
    *,
    details: Mapping[str, object] | None = None,
    executed: bool = False,
) -> None:
    """Answer the HTTP request of `scope` with `status` and an error document (`error_body`),
    from an ASGI middleware, in the media type its client prefers."""
    body = error_body(message, code, details=details, executed=executed)
    start = refusal_headers(scope, body, headers)
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": body})
