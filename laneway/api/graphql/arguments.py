"""Argument parsing of the GraphQL API: ids, event cursors, statuses, list limits.

Owns how a client's argument becomes a value the engine takes, and the BAD_USER_INPUT it gets
when it cannot; also the ID-suffixed arguments' explicit names (`instanceID`, not the
`instanceId` Strawberry's default converter would make of `instance_id` in a host's schema).
Shared by the resolvers and the websocket direct path, which must read a subscription's
arguments exactly as the resolver does.
"""

import json
from typing import Annotated, TypeVar
from uuid import UUID

import strawberry
from strawberry.types.unset import UNSET

from laneway.engine.page_calls import MAX_LIST_LIMIT
from laneway.errors import InvalidInputError
from laneway.model import Status

T = TypeVar("T")

MAX_EVENT_ID = 2**63 - 1  # a PostgreSQL bigint
MAX_EVENT_ID_DIGITS = len(str(MAX_EVENT_ID))

InstanceID = Annotated[
    strawberry.ID,
    strawberry.argument(
        name="instanceID", description="The instance's id, a UUID (BAD_USER_INPUT otherwise)."
    ),
]
OptionalInstanceID = Annotated[
    strawberry.ID | None,
    strawberry.argument(
        name="instanceID",
        description="Only the events of this instance, by its id (a UUID, BAD_USER_INPUT "
        "otherwise); left out: the events of every instance.",
    ),
]
EntityID = Annotated[str, strawberry.argument(name="entityID", description="The entity's id.")]

# The filters workflowInstances and workflowInstancesConnection share.
NameFilter = Annotated[
    str | None, strawberry.argument(description="Only instances of the workflow of this name.")
]
QueueFilter = Annotated[
    str | None, strawberry.argument(description="Only instances in the queue of this name.")
]
StatusFilter = Annotated[
    str | None,
    strawberry.argument(
        description="Only instances in this status: pending, running, paused, waiting, "
        "completed, failed or cancelled (BAD_USER_INPUT otherwise)."
    ),
]
# workflowInstancesConnection's alone, as its concurrency key and version: workflowInstances
# keeps the seed contract's arguments verbatim (tests/test_schema_file.py).
ParentFilter = Annotated[
    strawberry.ID | None,
    strawberry.argument(
        name="parentID",
        description="Only the children of this instance (those it enqueued: their parentID), "
        "by its id (a UUID, BAD_USER_INPUT otherwise).",
    ),
]
StatusesFilter = Annotated[
    list[str] | None,
    strawberry.argument(
        description="Only instances in one of these statuses (BAD_USER_INPUT for an unknown "
        "one); given with status, an instance must match both."
    ),
]


def given(value: T | None) -> T | None:
    """An optional argument's value; None when the client left it out (UNSET) or sent null.

    Optional arguments default to UNSET so the SDL shows them as in the contract (`name:
    String`, not `name: String = null`).
    """
    return None if value is UNSET else value


def parse_instance_id(value: str, what: str = "instanceID") -> UUID:
    """An instance id argument (`what`: its name, for the message).

    Raises:
        InvalidInputError: not a UUID.
    """
    try:
        return UUID(value)
    except (TypeError, ValueError):
        raise InvalidInputError(f"{what} must be a UUID") from None


def parse_parent_id(value: str) -> UUID:
    """A parentID filter: an instance id, refused in its own name.

    Raises:
        InvalidInputError: not a UUID.
    """
    return parse_instance_id(value, "parentID")


def parse_event_id(value: str) -> int:
    """An event id argument: a decimal string of an integer from 0 to the bigint maximum.

    Raises:
        InvalidInputError: anything else.
    """
    if not (
        isinstance(value, str)
        and value.isascii()
        and value.isdigit()
        and len(value) <= MAX_EVENT_ID_DIGITS
        and int(value) <= MAX_EVENT_ID
    ):
        raise InvalidInputError(
            f"an event id must be a decimal string of an integer from 0 to {MAX_EVENT_ID}"
        )
    return int(value)


SHOWN_VALUE_CHARS = 40  # of a refused value, in its error message


def parse_status(value: str, argument: str = "status") -> Status:
    """A status, given as `argument` (named in the error, with the value refused).

    Raises:
        InvalidInputError: not one of the statuses.
    """
    try:
        return Status(value)
    except ValueError:
        known = ", ".join(s.value for s in Status)
        cut = "…" if len(value) > SHOWN_VALUE_CHARS else ""
        shown = json.dumps(value[:SHOWN_VALUE_CHARS] + cut, ensure_ascii=False)
        raise InvalidInputError(f"{argument} must be one of {known}; got {shown}") from None


def status_filter(
    status: str | None, statuses: list[str] | None, statuses_argument: str = "statuses"
) -> tuple[Status, ...] | None:
    """`status` and `statuses` together: an instance must match both when both are given.
    `statuses_argument`: what the error of a bad one calls the list (`filter.statuses`)."""
    wanted: set[Status] | None = None
    if statuses is not None:
        wanted = {parse_status(s, f"each of {statuses_argument}") for s in statuses}
    if status is not None:
        one = parse_status(status)
        wanted = {one} if wanted is None else wanted & {one}
    return None if wanted is None else tuple(sorted(wanted))


def check_limit(limit: int | None, default: int, maximum: int = MAX_LIST_LIMIT) -> int:
    """A list `limit` argument (null: the default), 1..maximum.

    Raises:
        InvalidInputError: out of range.
    """
    value = default if limit is None else limit
    if not 1 <= value <= maximum:
        raise InvalidInputError(f"limit must be between 1 and {maximum}")
    return value
