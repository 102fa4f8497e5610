"""Rate limits: token buckets per client, what a request costs, and RateLimits for /graphql.

Owns the buckets and the HTTP side of LANEWAY_RATE_LIMIT / LANEWAY_RATE_BURST. A client is
its bearer token when the token is valid, else its IP address, so neither guessing tokens nor
leaving them out buys a fresh bucket. A request costs one token per root field it selects
(aliases and fragments count, the same response key twice does not), or one per 2 KiB of its
document if that is more, and never more than the burst; a bucket that cannot pay for the
size is refused before the document is parsed. Over the limit: HTTP 429 with a Retry-After
and code RATE_LIMITED, and nothing runs. The websocket side (subscribe messages, handshakes,
connections per token) is in websocket_limits.py and spends from the same buckets.
"""

import hashlib
import ipaddress
import itertools
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import parse_qs

from graphql import (
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
)

from laneway.api.auth import Access, check_bearer
from laneway.api.graphql.documents import parsed
from laneway.api.graphql.errors import RATE_LIMITED
from laneway.api.graphql.schema import MAX_TOKENS
from laneway.api.http.asgi import ASGIApp, Receive, Scope, Send, route_path
from laneway.api.http.body_limits import DECODED_BODY, request_refusal
from laneway.api.http.refusals import send_error

Clock = Callable[[], float]

RATE_LIMITED_MESSAGE = "Too many requests; slow down."
MAX_CLIENTS = 10_000  # buckets kept before full ones are forgotten
# A request costs a token per this many characters of its document if that is more than its
# root fields (root_field_cost): Laneway's own clients' documents are under 1 KiB.
CHARS_PER_TOKEN = 2048
# The one bucket of every client whose address is not an IP address: uvicorn takes any string
# a trusted peer forwards (X-Forwarded-For: zz0), so each new string would be a fresh bucket.
NOT_AN_ADDRESS = "ip:not-an-address"


@dataclass(slots=True)
class TokenBucket:
    """`burst` tokens at most, refilled at `rate` per second."""

    rate: float
    burst: float
    tokens: float
    updated_at: float

    def take(self, cost: float, now: float) -> float:
        """Spend `cost` tokens: 0.0 when admitted, else the seconds until it would be."""
        self.tokens = self.held(now)
        self.updated_at = now
        if self.tokens >= cost:
            self.tokens -= cost
            return 0.0
        return (cost - self.tokens) / self.rate

    def held(self, now: float) -> float:
        """The tokens it holds at `now`, refilled since it was last spent from."""
        return min(self.burst, self.tokens + (now - self.updated_at) * self.rate)

    def is_full(self, now: float) -> bool:
        return self.held(now) >= self.burst


class RateLimiter:
    """A token bucket per key, all with the same rate and burst.

    Buckets that have refilled completely are forgotten once there are more than
    `max_keys`, since a fresh bucket is the same thing; when none has, the oldest quarter.
    """

    def __init__(
        self,
        rate: float,
        burst: float,
        *,
        clock: Clock = time.monotonic,
        max_keys: int = MAX_CLIENTS,
    ) -> None:
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self.max_keys = max_keys
        self._buckets: dict[str, TokenBucket] = {}

    def take(self, key: str, cost: float = 1.0) -> float:
        """Spend `cost` (at most the burst) from `key`'s bucket: 0.0, or seconds to wait."""
        now = self.clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self.max_keys:
                self._forget_full(now)
            bucket = TokenBucket(self.rate, self.burst, self.burst, now)
            self._buckets[key] = bucket
        return bucket.take(min(cost, self.burst), now)

    def wait(self, key: str, cost: float = 1.0) -> float:
        """Seconds until `key`'s bucket holds `cost` (at most the burst), spending nothing."""
        bucket = self._buckets.get(key)
        if bucket is None:
            return 0.0
        return max(0.0, (min(cost, self.burst) - bucket.held(self.clock())) / self.rate)

    def _forget_full(self, now: float) -> None:
        for key in [k for k, b in self._buckets.items() if b.is_full(now)]:
            del self._buckets[key]
        if len(self._buckets) >= self.max_keys:
            # None had refilled (many clients, each spending): the oldest quarter goes in one
            # sweep, so the table stays bounded and this scan comes once per quarter of new
            # clients, not at every one. A client forgotten so starts again with a full bucket.
            for key in list(itertools.islice(self._buckets, max(1, self.max_keys // 4))):
                del self._buckets[key]


def retry_after(seconds: float) -> str:
    """A Retry-After value: whole seconds, at least 1."""
    return str(max(1, math.ceil(seconds)))


def client_key(
    credential: object,
    tokens: tuple[str, ...],
    client: tuple[str, int] | None,
    *,
    limit_local: bool = True,
) -> str | None:
    """Whom a request counts against: its valid token (hashed), else its IP address, written
    one way (so `::1` and `0:0::1`, or `1.2.3.4` and `::ffff:1.2.3.4`, are one client), an
    IPv6 one by its /64 (the block one host is given).

    A client whose address is not an IP address counts against NOT_AN_ADDRESS, one bucket
    for all of them, never as local. Behind a peer that uvicorn trusts (FORWARDED_ALLOW_IPS,
    127.0.0.1 and ::1 by default) the address is what X-Forwarded-For says (docs/limits.md),
    and uvicorn takes any string there: the peer's own address is gone by then, so a client
    that invents a new one each time gains one shared bucket, not a fresh bucket per string.

    None (not limited): a client on this machine without a valid token, unless `limit_local`
    (`make run`, local scripts and tests are not throttled; token holders count per token
    wherever they are).
    """
    if tokens and check_bearer(credential, tokens) is Access.GRANTED:
        assert isinstance(credential, str)
        token = credential.strip().partition(" ")[2].strip()  # however "Bearer" is spelled
        return "token:" + hashlib.sha256(token.encode()).hexdigest()[:32]
    try:
        # Without an IPv6 zone (fe80::1%eth0): any text is a zone, so a new bucket each time.
        address = ipaddress.ip_address((client[0] if client else "").partition("%")[0])
    except ValueError:
        return NOT_AN_ADDRESS
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if not limit_local and address.is_loopback:
        return None
    if isinstance(address, ipaddress.IPv6Address) and not address.is_loopback:
        # One host holds a whole /64 (SLAAC, privacy addresses): per address, it could take
        # a fresh bucket per request.
        return f"ip:{ipaddress.IPv6Network((address, 64), strict=False)}"
    return f"ip:{address}"


def _root_keys(
    selections: SelectionSetNode,
    fragments: dict[str, FragmentDefinitionNode],
    seen_fragments: set[str],
) -> Iterator[str]:
    for selection in selections.selections:
        if isinstance(selection, FieldNode):
            yield (selection.alias or selection.name).value
        elif isinstance(selection, InlineFragmentNode):
            yield from _root_keys(selection.selection_set, fragments, seen_fragments)
        elif isinstance(selection, FragmentSpreadNode):
            name = selection.name.value
            if name in fragments and name not in seen_fragments:
                seen_fragments.add(name)
                yield from _root_keys(fragments[name].selection_set, fragments, seen_fragments)


def size_cost(query: object) -> int:
    """What a document costs for its size alone (at least 1), read without parsing it: a
    client whose bucket cannot pay this is refused before anything parses its document."""
    return max(1, len(query) // CHARS_PER_TOKEN) if isinstance(query, str) else 1


def root_field_cost(query: object, operation_name: object = None) -> int:
    """The request's cost: how many root fields the operation selects, or one per
    CHARS_PER_TOKEN characters of its document, whichever is more (at least 1).

    The size counts because parsing and validating a document costs the server time in
    proportion to it, whatever it selects: documents of ~1,900 fields under one root field,
    or that did not even parse, cost ~80 ms each here, and eight connections of one client
    within its rate limit stalled every other request for seconds (an outside audit). A
    document that does not parse, or names no operation it holds, costs its size alone;
    Strawberry rejects it anyway.
    """
    size = size_cost(query)
    if not isinstance(query, str):
        return size
    document = parsed(query, MAX_TOKENS)
    if isinstance(document, GraphQLError):
        return size
    fragments: dict[str, FragmentDefinitionNode] = {}
    operations: list[OperationDefinitionNode] = []
    for definition in document.definitions:
        if isinstance(definition, FragmentDefinitionNode):
            fragments[definition.name.value] = definition
        elif isinstance(definition, OperationDefinitionNode):
            operations.append(definition)
    chosen = [
        o
        for o in operations
        if operation_name is None or (o.name is not None and o.name.value == operation_name)
    ]
    if not chosen:
        return size
    return max(size, len(set(_root_keys(chosen[0].selection_set, fragments, set()))))


def _http_operation(scope: Scope) -> tuple[object, object]:
    """The query and operationName of an HTTP GraphQL request, from its body or query string."""
    body = scope.get(DECODED_BODY)
    if isinstance(body, dict):
        return body.get("query"), body.get("operationName")
    if scope["method"] == "GET":
        params = parse_qs(bytes(scope.get("query_string", b"")).decode("latin-1"))
        query, name = params.get("query", []), params.get("operationName", [])
        return (query[0] if query else None), (name[0] if name else None)
    return None, None


def _authorization(scope: Scope) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == b"authorization":
            return bytes(value).decode("latin-1")
    return None


class RateLimits:
    """Pure ASGI middleware charging each /graphql HTTP request to its client's bucket.

    Sits inside RequestLimits, whose decoded body it reads. `limiter` None turns it off.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        limiter: RateLimiter | None,
        tokens: tuple[str, ...],
        limit_local: bool = True,
        path: str = "/graphql",
        max_tokens: int = MAX_TOKENS,
    ) -> None:
        self.app = app
        self.limiter = limiter
        self.tokens = tokens
        self.limit_local = limit_local
        self.path = path
        self.max_tokens = max_tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            self.limiter is None
            or scope["type"] != "http"
            or route_path(scope).rstrip("/") != self.path
        ):
            await self.app(scope, receive, send)
            return
        key = client_key(
            _authorization(scope), self.tokens, scope.get("client"), limit_local=self.limit_local
        )
        query, operation_name = _http_operation(scope)
        if key is not None:
            # A bucket that cannot pay for the document's size is refused before anything
            # parses it: refusals that parsed cost the server as much as answers (an audit).
            wait = self.limiter.wait(key, size_cost(query))
            if not wait:
                wait = self.limiter.take(key, root_field_cost(query, operation_name))
            if wait:
                headers = [(b"retry-after", retry_after(wait).encode())]
                await send_error(scope, send, 429, RATE_LIMITED_MESSAGE, RATE_LIMITED, headers)
                return
        # RequestLimits left the operation check of a POST body, which parses, to this layer.
        body = scope.get(DECODED_BODY)
        refused = request_refusal(body, self.max_tokens) if isinstance(body, dict) else None
        if refused is not None:
            await send_error(scope, send, 400, *refused)
            return
        await self.app(scope, receive, send)
