"""Asking the Permission: the field permissions, and the check the websocket paths share.

Owns turning a resolver's (or a websocket's) context into a Caller, asking the context's
Permission (auth.py) whether it may read or write, and turning a refusal into the client's
UNAUTHENTICATED or FORBIDDEN. CanRead guards every query and `workflowEvents`, CanWrite every
mutation; the websocket connect check and the direct-delivery path call `decide` itself.
"""

from enum import Enum
from typing import Any

from strawberry.permission import BasePermission
from strawberry.types import Info

from laneway.api.auth import Caller, Decision, credential_of, refusal_message
from laneway.api.graphql.context import connection_params_of, laneway_of
from laneway.api.graphql.errors import ForbiddenError, UnauthenticatedError


class Action(Enum):
    READ = "read"
    WRITE = "write"


def caller_of(context: object) -> Caller:
    """The Caller behind a GraphQL context (Laneway's own or a host's).

    A websocket's credential is the "authorization" of its `connection_init` payload (the key
    in any case, auth.credential_of), found where Strawberry stored the payload: on the host's
    context, else on the LanewayContext.
    """
    laneway = laneway_of(context)
    params = connection_params_of(context)
    if params is None:
        params = laneway.connection_params
    credential = credential_of(params) if params is not None else laneway.authorization
    return Caller(
        context=context,
        connection=laneway.connection,
        credential=credential,
        connection_params=params,
    )


async def decide(context: object, action: Action) -> Decision:
    """May the caller behind `context` read (or write)? The context's Permission answers."""
    permission = laneway_of(context).permission
    caller = caller_of(context)
    if action is Action.WRITE:
        return await permission.may_write(caller)
    return await permission.may_read(caller)


async def require(context: object, action: Action) -> None:
    """Raise the API error of a refusal of the caller behind `context`, saying what
    auth.refusal_message says.

    Raises:
        UnauthenticatedError: no credential was given, and one is needed.
        ForbiddenError: the credential does not allow the operation.
    """
    decision = await decide(context, action)
    if decision is Decision.ALLOW:
        return
    message = refusal_message(laneway_of(context).permission, decision)
    if decision is Decision.UNAUTHENTICATED:
        raise UnauthenticatedError(message)
    raise ForbiddenError(message)


class CanRead(BasePermission):
    """Queries and subscriptions: what the Permission's `may_read` allows."""

    message = "Not allowed to read."

    async def has_permission(self, source: Any, info: Info[Any, Any], **kwargs: Any) -> bool:
        await require(info.context, Action.READ)
        return True


class CanWrite(BasePermission):
    """Mutations: what the Permission's `may_write` allows."""

    message = "Not allowed to write."

    async def has_permission(self, source: Any, info: Info[Any, Any], **kwargs: Any) -> bool:
        await require(info.context, Action.WRITE)
        return True
