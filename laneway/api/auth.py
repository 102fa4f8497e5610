"""Bearer tokens (LANEWAY_API_TOKENS): who may read and who may write.

Owns checking a credential against the configured tokens and the two field permissions.
HTTP requests carry `Authorization: Bearer …`; a websocket carries the same string in its
`connection_init` payload under "authorization" (laneway.py rejects a bad one with 4403).
"""

import hmac
from collections.abc import Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any

from strawberry.permission import BasePermission
from strawberry.types import Info

from laneway.api.graphql.errors import ForbiddenError, UnauthenticatedError

if TYPE_CHECKING:
    from laneway.api.graphql.context import RequestContext


class Access(Enum):
    """What a request's credential amounts to."""

    OPEN = "open"  # no tokens are configured: everything is allowed
    GRANTED = "granted"
    MISSING = "missing"
    WRONG = "wrong"

    @property
    def is_allowed(self) -> bool:
        return self in (Access.OPEN, Access.GRANTED)


def check_bearer(authorization: object, tokens: Sequence[str]) -> Access:
    """Check an `Authorization` value ("Bearer <token>") against the configured tokens.

    Every token is compared in constant time, so timing reveals neither which token nor how
    much of one matched.
    """
    if not tokens:
        return Access.OPEN
    if authorization is None or authorization == "":
        return Access.MISSING
    if not isinstance(authorization, str):
        return Access.WRONG
    scheme, _, credential = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not credential.strip():
        return Access.WRONG
    given = credential.strip().encode()
    matched = False
    for token in tokens:
        matched |= hmac.compare_digest(given, token.encode())
    return Access.GRANTED if matched else Access.WRONG


def require(access: Access) -> None:
    """Raise the API error for a credential that does not allow the operation.

    Raises:
        UnauthenticatedError: no credential was given.
        ForbiddenError: the credential is not one of the configured tokens.
    """
    if access is Access.MISSING:
        raise UnauthenticatedError("This operation needs an `Authorization: Bearer` token.")
    if access is Access.WRONG:
        raise ForbiddenError("The token is not valid.")


class CanRead(BasePermission):
    """Queries and subscriptions: a valid token, unless reads are open (LANEWAY_OPEN_READS)."""

    message = "Not allowed to read."

    def has_permission(
        self, source: Any, info: "Info[RequestContext, None]", **kwargs: Any
    ) -> bool:
        context = info.context
        if not context.settings.open_reads:
            require(context.access)
        return True


class CanWrite(BasePermission):
    """Mutations: a valid token whenever tokens are configured."""

    message = "Not allowed to write."

    def has_permission(
        self, source: Any, info: "Info[RequestContext, None]", **kwargs: Any
    ) -> bool:
        require(info.context.access)
        return True
