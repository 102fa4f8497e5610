"""Who may read and who may write: the Permission hook, and BearerTokens, its default.

Owns the one rule of the API. A Permission answers "may this caller read?" and "may this
caller write?" with a Decision; Laneway's field permissions, its websocket connect check and
its websocket direct-delivery path all ask it (graphql/permissions.py does the asking). A host
application passes its own Permission to `create_app` or `laneway_context`; without one,
BearerTokens checks LANEWAY_API_TOKENS, and LANEWAY_OPEN_READS lets a caller without any
credential read.

HTTP requests carry `Authorization: Bearer …`; a websocket carries the same string in its
`connection_init` payload under "authorization", the key spelled in any case (browsers cannot
set headers on a websocket; Apollo's and urql's examples send "Authorization"). Knows nothing
of GraphQL.
"""

import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol, Self

from starlette.requests import HTTPConnection

from laneway.config import Settings


class Access(Enum):
    """What a credential amounts to against the configured tokens."""

    OPEN = "open"  # no tokens are configured: everything is allowed
    GRANTED = "granted"
    MISSING = "missing"
    WRONG = "wrong"

    @property
    def is_allowed(self) -> bool:
        return self in (Access.OPEN, Access.GRANTED)


class Decision(Enum):
    """A Permission's answer. A refusal says which error the client gets.

    UNAUTHENTICATED and FORBIDDEN become the refused operation's `extensions.code` (over HTTP
    with status 200, as any GraphQL error), and 401 and 403 on /metrics. Laneway's own app
    closes a websocket whose `may_read` is not ALLOW with 4403 after `connection_init`; a
    host's own view accepts it and refuses each operation instead.
    """

    ALLOW = "allow"
    UNAUTHENTICATED = "unauthenticated"  # no credential, and one is needed
    FORBIDDEN = "forbidden"  # a credential that does not allow this


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is asking, as a Permission sees them.

    `context` is the GraphQL context the resolvers receive: the host's own (its user, its
    session) or Laneway's. `connection` is the HTTP request or websocket, None for a schema
    executed inside the process. `credential` is the `Authorization` header of an HTTP
    request, or the "authorization" entry (in any case) of a websocket's `connection_init`
    payload (`connection_params`, None until that message arrives; see `credential_of`).
    """

    context: object
    connection: HTTPConnection | None
    credential: object
    connection_params: Mapping[str, object] | None


class Permission(Protocol):
    """The permission hook: decides whether a caller may read (queries, `workflowEvents`, a
    websocket connection) and whether it may write (mutations).

    Both are async, so a host may look its caller up; neither should raise.
    """

    async def may_read(self, caller: Caller) -> Decision: ...

    async def may_write(self, caller: Caller) -> Decision: ...


def credential_of(params: object) -> object:
    """The credential in a websocket's `connection_init` payload: its "authorization" entry,
    the key spelled in any case ("Authorization" too); None when there is none.

    The lower-case key wins when a payload has several spellings.
    """
    if not isinstance(params, Mapping):
        return None
    if "authorization" in params:
        return params["authorization"]
    for key, value in params.items():
        if isinstance(key, str) and key.lower() == "authorization":
            return value
    return None


def check_bearer(authorization: object, tokens: Sequence[str]) -> Access:
    """Check an `Authorization` value ("Bearer <token>") against the configured tokens.

    A value of another scheme (`Basic …`, say, which a reverse proxy's login passes on) is no
    credential here, as if there were none: MISSING, so UNAUTHENTICATED, not FORBIDDEN, which
    says that a credential the API takes does not allow the operation. Every token is compared
    in constant time, so timing reveals neither which token nor how much of one matched.
    """
    if not tokens:
        return Access.OPEN
    if authorization is None or authorization == "":
        return Access.MISSING
    if not isinstance(authorization, str):
        return Access.WRONG
    scheme, _, credential = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return Access.MISSING
    if not credential.strip():
        return Access.WRONG
    given = credential.strip().encode()
    matched = False
    for token in tokens:
        matched |= hmac.compare_digest(given, token.encode())
    return Access.GRANTED if matched else Access.WRONG


_DECISIONS = {
    Access.OPEN: Decision.ALLOW,
    Access.GRANTED: Decision.ALLOW,
    Access.MISSING: Decision.UNAUTHENTICATED,
    Access.WRONG: Decision.FORBIDDEN,
}


@dataclass(frozen=True, slots=True)
class BearerTokens:
    """The default Permission: a caller reads and writes with one of `tokens`.

    No tokens: everyone may do everything. `open_reads`: a caller without a credential may
    read too; a wrong credential is refused for reads as well, so a client learns that its
    token is bad on its first request rather than on its first write.
    """

    tokens: tuple[str, ...]
    open_reads: bool = False

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        """LANEWAY_API_TOKENS and LANEWAY_OPEN_READS."""
        return cls(tokens=tuple(settings.api_tokens), open_reads=settings.open_reads)

    async def may_read(self, caller: Caller) -> Decision:
        access = check_bearer(caller.credential, self.tokens)
        if access is Access.MISSING and self.open_reads:
            return Decision.ALLOW
        return _DECISIONS[access]

    async def may_write(self, caller: Caller) -> Decision:
        return _DECISIONS[check_bearer(caller.credential, self.tokens)]


def refusal_message(permission: Permission, decision: Decision) -> str:
    """What a refusal says, for an operation as for /metrics: only BearerTokens's names its
    header (a host's own Permission may want a session, a cookie, …)."""
    if decision is Decision.FORBIDDEN:
        return "The credential does not allow this operation."
    if isinstance(permission, BearerTokens):
        return "This operation needs an `Authorization: Bearer` token."
    return "This operation needs authentication."
