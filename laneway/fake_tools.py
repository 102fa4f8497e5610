"""FakeTools: a handler's InstanceTools kept in memory, for tests without a database.

Owns the fake's behaviour only, which mirrors the engine's (children once per workflow and
key, keyed signals once per instance and key, operations once per position, locks with
growing fencing tokens); laneway.testing re-exports it with the helpers that hand it to a
handler, and that is where users import it.
"""

import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from uuid import UUID

from laneway.engine.context import StageReport
from laneway.engine.payloads import encode_json
from laneway.engine.requests import check_signal, child_key
from laneway.model import JSONValue, LockRecord, OperationRecord


@dataclass(frozen=True, slots=True, kw_only=True)
class EnqueuedChild:
    """A child instance a handler enqueued through FakeTools."""

    name: str
    params: JSONValue
    instance_id: UUID
    key: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SentSignal:
    """A signal a handler sent through FakeTools (one a repeated key sent again is not)."""

    instance_id: UUID
    name: str
    payload: JSONValue
    idempotency_key: str | None = None


class FakeTools:
    """The InstanceTools of one instance, kept in memory: what a handler did is in the lists.

    Behaves like the engine's: a child is enqueued once per (workflow, key), a signal with
    an idempotency key is sent once per (instance, key), an operation is recorded once per
    (stage, position), with its stage's report as of then kept in `report`, and a lock is
    taken when it is free, expired or already this instance's, with a fencing token that grows
    on every acquisition.
    """

    def __init__(self, instance_id: UUID) -> None:
        self.instance_id = instance_id
        self.operations: list[OperationRecord] = []
        self.children: list[EnqueuedChild] = []
        self.signals: list[SentSignal] = []
        self.locks: dict[tuple[str, str], LockRecord] = {}
        # The running stage's report (stage, progress, status line) as its last recorded
        # operation left it; None until an operation is recorded with one.
        self.report: StageReport | None = None
        self._last_token = 0

    async def finished_operations(self) -> list[OperationRecord]:
        return list(self.operations)

    async def record_operation(
        self,
        operation: OperationRecord,
        *,
        seconds: float,
        encoded: tuple[str, str] | None = None,
        carried: bool = False,
        report: Callable[[], StageReport] | None = None,
    ) -> None:
        """Record the operation at once, as if written on its own: with the stage's report as
        of then in `report` (the engine writes it to the instance with the outcome)."""
        if encoded is None:
            encode_json(operation.data, what="operation data")
            encode_json(operation.metadata, what="operation metadata")
        now = datetime.now(UTC)
        recorded = replace(operation, started_at=now - timedelta(seconds=seconds), finished_at=now)
        key = (operation.stage, operation.position)
        self.operations = [o for o in self.operations if (o.stage, o.position) != key]
        self.operations.append(recorded)
        if report is not None:
            self.report = report()

    async def write_operations(self) -> None:
        """Recorded at once here: nothing is kept back."""

    async def enqueue_child(self, name: str, params: JSONValue, *, key: str | None = None) -> UUID:
        child_key(self.instance_id, name, key)  # a bad key is refused as the engine refuses it
        encode_json(params, what="params")
        for child in self.children:
            if (child.name, child.key) == (name, key):
                return child.instance_id
        child = EnqueuedChild(name=name, params=params, instance_id=uuid.uuid4(), key=key)
        self.children.append(child)
        return child.instance_id

    async def signal(
        self,
        instance_id: UUID,
        name: str,
        payload: JSONValue = None,
        *,
        idempotency_key: str | None = None,
    ) -> bool:
        """Record the signal in `signals`; False (recording nothing) for a repeated key. Any
        instance id is taken: there is no database to find it, or to find it ended, in."""
        check_signal(name, idempotency_key)  # refused as the engine refuses them
        encode_json(payload, what="payload")
        if idempotency_key is not None and any(
            (sent.instance_id, sent.idempotency_key) == (instance_id, idempotency_key)
            for sent in self.signals
        ):
            return False
        self.signals.append(
            SentSignal(
                instance_id=instance_id,
                name=name,
                payload=payload,
                idempotency_key=idempotency_key,
            )
        )
        return True

    async def acquire_lock(
        self, entity_type: str, entity_id: str, ttl_seconds: float
    ) -> LockRecord | None:
        return self._acquire(entity_type, entity_id, self.instance_id, ttl_seconds)

    async def release_lock(self, lock: LockRecord) -> bool:
        key = (lock.entity_type, lock.entity_id)
        current = self.locks.get(key)
        if current is None or current.fencing_token != lock.fencing_token:
            return False
        del self.locks[key]
        return True

    def occupy(self, entity_type: str, entity_id: str, *, ttl_seconds: float = 60.0) -> LockRecord:
        """Have another (made-up) instance hold an entity, to test a handler under contention."""
        lock = self._acquire(entity_type, entity_id, uuid.uuid4(), ttl_seconds)
        if lock is None:
            raise RuntimeError(f"{entity_type}:{entity_id} is already held")
        return lock

    def _acquire(
        self, entity_type: str, entity_id: str, owner: UUID, ttl_seconds: float
    ) -> LockRecord | None:
        now = datetime.now(UTC)
        current = self.locks.get((entity_type, entity_id))
        if current is not None and current.expires_at > now and current.owner_instance != owner:
            return None
        self._last_token += 1
        lock = LockRecord(
            entity_type=entity_type,
            entity_id=entity_id,
            owner_instance=owner,
            fencing_token=self._last_token,
            expires_at=now + timedelta(seconds=ttl_seconds),
        )
        self.locks[(entity_type, entity_id)] = lock
        return lock
