"""How a Laneway root field is declared, so that it keeps its rules in any schema.

Owns what travels with each field into a host's schema as well as Laneway's own: its GraphQL
name (explicit, so `instanceID` comes out the same under any name converter), its permission
(CanRead or CanWrite), CodedErrors (a LanewayError leaves with its `extensions.code`), and for
a mutation, Completion (the request's trace learns that it completed, or failed after which).
"""

from collections.abc import Callable
from typing import Any

import strawberry
from strawberry.extensions import FieldExtension
from strawberry.extensions.field_extension import AsyncExtensionResolver, SyncExtensionResolver
from strawberry.types import Info

from laneway.api.graphql.errors import CodedErrors
from laneway.api.graphql.permissions import CanRead, CanWrite
from laneway.api.request_trace import current_trace
from laneway.errors import BulkStoppedError


def _completed(info: Info[Any, Any]) -> None:
    trace = current_trace()
    if trace is not None:
        trace.record_completed(str(info.path.key))


def _failed(info: Info[Any, Any]) -> None:
    trace = current_trace()
    if trace is not None:
        trace.record_failed(str(info.path.key))


class Completion(FieldExtension):
    """On every Laneway mutation: once it has committed, the HTTP request's trace lists it, so
    that no answer to the request says nothing happened (a 503 or 504 a client would retry);
    and when it fails, the trace notes which had completed before it. An error at or below it
    lists those that completed up to it (`extensions.completed`, graphql/errors.py): a failure
    that reaches a non-null root field nulls the whole `data`, which would otherwise hide them.

    A mutation commits when its resolver returns, or when a bulk action stops at the deadline
    having changed some instances (BulkStoppedError): its batches committed one by one.
    """

    def resolve(
        self, next_: SyncExtensionResolver, source: Any, info: Info[Any, Any], **kwargs: Any
    ) -> Any:
        try:
            result = next_(source, info, **kwargs)
        except Exception:
            _failed(info)
            raise
        _completed(info)
        return result

    async def resolve_async(
        self, next_: AsyncExtensionResolver, source: Any, info: Info[Any, Any], **kwargs: Any
    ) -> Any:
        try:
            result = await next_(source, info, **kwargs)
        except BulkStoppedError as exc:
            _failed(info)
            if exc.changed:
                _completed(info)
            raise
        except Exception:
            _failed(info)
            raise
        _completed(info)
        return result


def query(
    resolver: Callable[..., Any], *, name: str | None = None, description: str | None = None
) -> Any:
    """A query field: readers only."""
    return strawberry.field(
        resolver=resolver,
        name=name,
        description=description,
        permission_classes=[CanRead],
        extensions=[CodedErrors()],
    )


def mutation(
    resolver: Callable[..., Any], *, name: str | None = None, description: str | None = None
) -> Any:
    """A mutation field: writers only."""
    return strawberry.mutation(
        resolver=resolver,
        name=name,
        description=description,
        permission_classes=[CanWrite],
        # Completion first, inside CodedErrors: it sees a BulkStoppedError as raised.
        extensions=[Completion(), CodedErrors()],
    )


def subscription(
    resolver: Callable[..., Any], *, name: str | None = None, description: str | None = None
) -> Any:
    """A subscription field: readers only."""
    return strawberry.subscription(
        resolver=resolver,
        name=name,
        description=description,
        permission_classes=[CanRead],
        extensions=[CodedErrors()],
    )
