"""Entity locks: at most one instance holds a named entity at a time, with a fencing token.

Owns acquiring (optionally waiting), releasing and the async context manager. Locks are rows
with an expiry on the database clock; the token grows with every acquisition, so a holder
whose lock expired and was taken can be told apart from the new one. A lock held by an
instance is dropped when the instance ends (store).
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator
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


class EntityLocks:
    """Acquire and release entity locks on behalf of instances."""

    def __init__(self, store: Store) -> None:
        self._store = store

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
        check_name(entity_type, "entity type")
        if not entity_id or len(entity_id) > 255:
            raise InvalidInputError("entity id must be 1-255 characters")
        if not 0 < ttl_seconds <= MAX_TTL_SECONDS:
            raise InvalidInputError("lock ttl must be between 0 and 86400 seconds")
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

        Raises:
            LockUnavailableError: it could not be taken within `wait_seconds`.
        """
        lock = await self.acquire(
            entity_type, entity_id, owner_instance, ttl_seconds, wait_seconds=wait_seconds
        )
        if lock is None:
            raise LockUnavailableError(owner_instance, entity_type, entity_id)
        try:
            yield lock
        finally:
            await self.release(lock)
