"""Waiting reasons over GraphQL: which statuses have one, and the read of instances together
with their reasons, so that an instance's `status` and `waitingReason` show one moment.

Owns read_with_reasons, which the fields that read instances (workflowInstance,
workflowInstances, workflowInstancesConnection) call. Does not decide a reason (the store's
WAITING_REASONS does, with the claim's predicates) nor build the types (types.py).
"""

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar
from uuid import UUID

from strawberry.types import Info

from laneway.api.graphql.context import laneway_of
from laneway.api.graphql.payload_fields import selects_any
from laneway.model import InstanceRecord, Status, WaitingReason

# The statuses that have a waiting reason (`status` values); the others have none.
WAITING_STATUSES = frozenset({Status.PENDING.value, Status.PAUSED.value, Status.WAITING.value})

# The field's name under Strawberry's default name converter, and in a host's schema that keeps
# Python's names (auto_camel_case off).
_FIELD_NAMES = frozenset({"waitingReason", "waiting_reason"})

Read = TypeVar("Read")


async def read_with_reasons(
    info: Info[Any, Any],
    read: Callable[[], Awaitable[Read]],
    records_of: Callable[[Read], Iterable[InstanceRecord]],
) -> tuple[Read, dict[UUID, WaitingReason] | None]:
    """`read()`'s result and, when the response asks for `waitingReason`, the reasons of the
    instances in it that wait (`records_of` finds them), read in the same snapshot (None when
    it does not ask: the read costs no transaction then).

    The reasons come from a statement of their own, in one query for a page. Read outside the
    rows' snapshot, they showed an instance that moved on in between (an outside audit, under
    load: `pending` beside a null reason, `waiting` beside QUEUE_FULL), so both are read in
    one read-only REPEATABLE READ transaction (Store.snapshot).
    """
    if not selects_any(info.selected_fields, _FIELD_NAMES):  # fragments, @skip too
        return await read(), None
    store = laneway_of(info.context).services.store
    async with store.snapshot():
        found = await read()
        waiting = [r.instance_id for r in records_of(found) if r.status in WAITING_STATUSES]
        reasons = await store.waiting_reasons(waiting) if waiting else {}
    return found, reasons
