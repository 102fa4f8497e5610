"""Entity locks: at most one instance holds a named entity at a time, with a fencing token.

Owns acquiring (optionally waiting), releasing and the async context manager. Locks are rows
with an expiry on the database clock; the token grows with every acquisition, so a holder
whose lock expired and was taken can be told apart from the new one. A lock held by an
instance is dropped when the instance ends (store). Counts the holds of one owner that are
open at once through one EntityLocks, so that the lock is released by the last one to exit.
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from uuid import UUID

from laneway.engine.handler_map import check_name
from laneway.errors import ConflictError, InvalidInputError
from laneway.model import LockRecord
from laneway.store import Store

MAX_TTL_SECONDS = 24 * 3600.0


class LockUnavailableError(ConflictError):
    """Another instance holds the entity."""

    def __init__(self, instance_id: UUID, entity_type: str, entity_id: str) -> None:
        super().__init__(instance_id, f"waiting for {entity_type}:{entity_id}", "lock")
        self.entity_type, self.entity_id = entity_type, entity_id


def _check(entity_type: str, entity_id: str, ttl_seconds: float) -> None:
    check_name(entity_type, "entity type")
    if not entity_id or len(entity_id) > 255:
        raise InvalidInputError("entity id must be 1-255 characters")
    if not 0 < ttl_seconds <= MAX_TTL_SECONDS:
        raise InvalidInputError("lock ttl must be between 0 and 86400 seconds")


@dataclass(slots=True)
class _Held:
    """A lock some `hold` blocks of one owner are inside: how many, and its newest record."""

    lock: LockRecord
    depth: int = 1


class EntityLocks:
    """Acquire and release entity locks on behalf of instances."""

    def __init__(self, store: Store) -> None:
        self._store = store
        # Open holds by (entity type, entity id, owner). A second acquisition by the owner
        # succeeds in the database (and draws a new token), and a release deletes the row
        # whoever else of that owner is still inside: the count keeps the row until the last.
        self._held: dict[tuple[str, str, UUID], _Held] = {}

    async def acquire(
        self,
        entity_type: str,
        entity_id: str,
        owner_instance: UUID,
        ttl_seconds: float,
        *,
        wait_seconds: float = 0.0,
    ) -> LockRecord | None:
        """Take the lock for `owner_instance`, waiting up to `wait_seconds`; None if still held.

        Raises:
            InvalidInputError: a bad entity type or id, or a ttl outside (0, 1 day].
        """
        _check(entity_type, entity_id, ttl_seconds)
        delay = 0.01
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_seconds if wait_seconds > 0 else None):
                while True:
                    lock = await self._store.acquire_lock(
                        entity_type, entity_id, owner_instance, ttl_seconds
                    )
                    if lock is not None or wait_seconds <= 0:
                        return lock
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 0.25)
        return None

    async def release(self, lock: LockRecord) -> bool:
        """Release a lock; False when it had expired and another owner took it."""
        return await self._store.release_lock(lock)

    async def holder(self, entity_type: str, entity_id: str) -> LockRecord | None:
        """The current, unexpired holder of an entity, if any."""
        return await self._store.current_lock(entity_type, entity_id)

    @contextlib.asynccontextmanager
    async def hold(
        self,
        entity_type: str,
        entity_id: str,
        owner_instance: UUID,
        ttl_seconds: float,
        *,
        wait_seconds: float = 30.0,
    ) -> AsyncIterator[LockRecord]:
        """Hold the lock for the block, releasing it on the way out.

        Re-entrant for one owner: a hold of an entity that the same owner already holds
        through this EntityLocks (a nested block, or a sibling task of the instance) shares
        that lock without asking the database again, so its `ttl_seconds` and `wait_seconds`
        are not used and it yields the same record, whose fencing token still fences the
        outer block. The lock is released when the last of these blocks exits, or sooner
        when the instance ends (as any lock of an instance is).

        Raises:
            InvalidInputError: a bad entity type or id, or a ttl outside (0, 1 day].
            LockUnavailableError: it could not be taken within `wait_seconds`.
        """
        _check(entity_type, entity_id, ttl_seconds)  # a nested hold's too, though unused
        key = (entity_type, entity_id, owner_instance)
        held = self._held.get(key)
        if held is not None:
            held.depth += 1
        else:
            lock = await self.acquire(
                entity_type, entity_id, owner_instance, ttl_seconds, wait_seconds=wait_seconds
            )
            if lock is None:
                raise LockUnavailableError(owner_instance, entity_type, entity_id)
            held = self._held.get(key)  # a sibling task of the owner may have taken it meanwhile
            if held is None:
                held = self._held[key] = _Held(lock)
            else:
                held.depth += 1
                # Tokens come from one sequence: the larger is the row's, which releases it.
                if lock.fencing_token > held.lock.fencing_token:
                    held.lock = lock
        try:
            yield held.lock
        finally:
            held.depth -= 1
            if held.depth == 0:
                # Forgotten before the release is awaited: a hold that starts meanwhile
                # acquires anew (a new token), which the release, by the old one, leaves.
                del self._held[key]
                await self.release(held.lock)
