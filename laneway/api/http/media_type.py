"""The GraphQL-over-HTTP media types: which one a client gets, and what its answer's status is.

Owns the choice between application/json, what every client got before and still gets when it
asks for it, for */* or for nothing, and application/graphql-response+json, which Apollo
Client and urql ask for. Under the latter a request error (the document does not parse or
validate, or the variables do not coerce: nothing ran) is HTTP 400 without `data`, and an
operation that ran is 200 even with field errors. The GraphQL view (app.py) applies it.
"""

import functools

from strawberry.types import ExecutionResult

from laneway.api.graphql.errors import SERVICE_UNAVAILABLE, code_for, is_expected
from laneway.api.http.asgi import Scope

GRAPHQL_RESPONSE = "application/graphql-response+json"
GRAPHQL_RESPONSE_CONTENT_TYPE = f"{GRAPHQL_RESPONSE}; charset=utf-8"
# What application/json matches in an Accept header, most specific first.
_JSON_RANGES = {"application/json": 2, "application/*": 1, "*/*": 0}


def _quality(parameters: str) -> float | None:
    """The q of a media range's parameters (1 when there is none); None when it is malformed."""
    for parameter in parameters.split(";"):
        key, _, value = parameter.partition("=")
        if key.strip().lower() == "q":
            try:
                quality = float(value.strip())
            except ValueError:
                return None
            return quality if 0.0 <= quality <= 1.0 else None
    return 1.0


@functools.lru_cache(maxsize=256)
def wants_graphql_response(accept: str | None) -> bool:
    """True when `accept` names application/graphql-response+json with a q above 0 and no
    lower than application/json's (however that is matched: exactly, application/*, */*).

    Cached: a client sends the same Accept header with every request.
    """
    if not accept or GRAPHQL_RESPONSE not in accept.lower():
        return False
    graphql = 0.0
    json, json_rank = 0.0, -1
    for media_range in accept.split(","):
        media, _, parameters = media_range.partition(";")
        media = media.strip().lower()
        quality = _quality(parameters)
        if quality is None:
            continue
        if media == GRAPHQL_RESPONSE:
            graphql = max(graphql, quality)
        rank = _JSON_RANGES.get(media, -1)
        if rank > json_rank:
            json, json_rank = quality, rank
    return graphql > 0.0 and graphql >= json


@functools.lru_cache(maxsize=256)
def names_html(accept: str | None) -> bool:
    """True when `accept` names text/html itself with a q above 0, as a browser's does
    (`text/html,application/xhtml+xml,…,*/*;q=0.8`); `*/*` alone, curl's and httpx's default,
    or `text/*` is not a request for a page.

    Cached: a client sends the same Accept header with every request.
    """
    if not accept or "text/html" not in accept.lower():
        return False
    for media_range in accept.split(","):
        media, _, parameters = media_range.partition(";")
        if media.strip().lower() == "text/html":
            quality = _quality(parameters)
            if quality is not None and quality > 0.0:
                return True
    return False


def is_request_error(result: ExecutionResult) -> bool:
    """True when nothing ran: no data, and every error is one of the request's own (parse,
    validation, variable coercion), at no path.

    An internal fault, or SERVICE_UNAVAILABLE before execution (a database unavailable, or one
    a newer release migrated under this process), is not the request's fault: those stay 200
    (503 once RequestIds has seen the database's state).
    """
    if result.data is not None or not result.errors:
        return False
    return all(
        error.path is None
        and is_expected(error)
        and code_for(error.original_error) != SERVICE_UNAVAILABLE
        for error in result.errors
    )


def error_media_type(accept: str | None) -> str:
    """The content type of an error document answered before any GraphQL ran (a body that
    is not JSON, no operation to run): the one the client asked for, as for any answer."""
    return GRAPHQL_RESPONSE_CONTENT_TYPE if wants_graphql_response(accept) else "application/json"


def answered_media_type(scope: Scope) -> str:
    """`error_media_type` for an HTTP scope, from an ASGI middleware: the request's Accept."""
    headers = scope.get("headers", ())  # a hand-built scope may have none
    accept = next((v.decode("latin-1") for k, v in headers if k == b"accept"), None)
    return error_media_type(accept)
