"""The order in which a batch enqueue inserts its rows, and so takes its unique keys' locks.

Owns that order, pure (no I/O): keyed rows sorted by their keys so that concurrent batches
sharing keys queue instead of deadlocking, and requests that share a key kept in request
order; and which requests repeat an earlier one's idempotency key, so are not inserted at all.
Does not insert (instances.py) or resolve conflicts.
"""

from collections.abc import Sequence
from uuid import UUID

from laneway.model import NewInstance


def _lock_order_key(new: NewInstance) -> tuple[bool, str, bool, str, str]:
    """Where a request's row sorts in a batch's lock order: by idempotency key, then workflow
    and singleton key (the two unique indexes a request can conflict on); none last."""
    return (
        new.idempotency_key is None,
        new.idempotency_key or "",
        new.singleton_key is None,
        new.name,
        new.singleton_key or "",
    )


def in_lock_order(batch: Sequence[NewInstance]) -> list[NewInstance]:
    """The batch in the order its rows are inserted, and so take their unique keys' locks.

    An insert whose key another transaction has just inserted waits for that transaction; two
    batches inserting shared keys in different orders could each hold a key the other waits
    for, a deadlock. Sorted by their keys (_lock_order_key), any two batches take the keys of
    one kind in one order, so they queue rather than cross. Rows that carry both kinds can still
    cross (an idempotency key's order is not their singleton key's), as can groups (below);
    the enqueue tries such a statement again (InstanceStore._insert_retried).

    Requests of the batch that share a key (directly, or through another request) keep their
    request order among themselves, as a group sorted where its first request sorts: the first
    of them takes the key, as one call after another would have it."""
    first_of: list[int] = list(range(len(batch)))  # each request's group: its first's index

    def first(index: int) -> int:
        while first_of[index] != index:
            first_of[index] = first_of[first_of[index]]
            index = first_of[index]
        return index

    holder: dict[tuple[str, ...], int] = {}
    for index, new in enumerate(batch):
        keys: list[tuple[str, ...]] = []
        if new.idempotency_key is not None:
            keys.append(("idempotency", new.idempotency_key))
        if new.singleton_key is not None:
            keys.append(("singleton", new.name, new.singleton_key))
        for key in keys:
            if key in holder:
                one, other = first(holder[key]), first(index)
                first_of[max(one, other)] = min(one, other)
            else:
                holder[key] = index
    if not holder:
        return list(batch)  # nothing to conflict on but fresh ids: any order will do

    def sort_key(index: int) -> tuple[tuple[bool, str, bool, str, str], int, int]:
        group = first(index)
        return (_lock_order_key(batch[group]), group, index)

    return [batch[index] for index in sorted(range(len(batch)), key=sort_key)]


def repeated_keys(batch: Sequence[NewInstance]) -> dict[UUID, UUID]:
    """Each request whose idempotency key an earlier request of the batch has: the first such
    request's id, by the repeat's. A repeat is given what the first is given, as one call
    after another would have it: by then the key answers with that instance, whether the
    first created it, found it holding the key, or found it holding its singleton key (and
    bound the key to it). So a repeat is not inserted, and cannot take the key for itself in
    the statement where the first gave way to a singleton key."""
    first_with: dict[str, UUID] = {}
    repeats: dict[UUID, UUID] = {}
    for new in batch:
        if new.idempotency_key is not None:
            first = first_with.setdefault(new.idempotency_key, new.instance_id)
            if first != new.instance_id:
                repeats[new.instance_id] = first
    return repeats
