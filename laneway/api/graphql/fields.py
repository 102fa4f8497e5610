"""How a Laneway root field is declared, so that it keeps its rules in any schema.

Owns what travels with each field into a host's schema as well as Laneway's own: its GraphQL
name (explicit, so `instanceID` comes out the same under any name converter), its permission
(CanRead or CanWrite), and CodedErrors (a LanewayError leaves with its `extensions.code`).
"""

from collections.abc import Callable
from typing import Any

import strawberry

from laneway.api.graphql.errors import CodedErrors
from laneway.api.graphql.permissions import CanRead, CanWrite


def query(resolver: Callable[..., Any], *, name: str | None = None) -> Any:
    """A query field: readers only."""
    return strawberry.field(
        resolver=resolver, name=name, permission_classes=[CanRead], extensions=[CodedErrors()]
    )


def mutation(resolver: Callable[..., Any], *, name: str | None = None) -> Any:
    """A mutation field: writers only."""
    return strawberry.mutation(
        resolver=resolver, name=name, permission_classes=[CanWrite], extensions=[CodedErrors()]
    )


def subscription(resolver: Callable[..., Any], *, name: str | None = None) -> Any:
    """A subscription field: readers only."""
    return strawberry.subscription(
        resolver=resolver, name=name, permission_classes=[CanRead], extensions=[CodedErrors()]
    )
