"""The tools a running instance's handler is given (RunnerTools): store calls fenced by the
instance's owner, the Engine's calls made for it (a child's enqueue, a signal), and a
template's operation outcomes kept until the instance's next write carries them (runner.py
drives the run; committer.py writes).
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from uuid import UUID

from laneway.engine.committer import Committer
from laneway.engine.context import StageReport
from laneway.engine.observer import EngineObserver
from laneway.engine.payloads import encode_json
from laneway.engine.record_builders import builder
from laneway.errors import LeaseLostError
from laneway.model import InstanceRecord, JSONValue, LockRecord, OperationRecord
from laneway.store import Store
from laneway.writes import OperationOutcome, OperationsWrite

logger = logging.getLogger(__name__)

# An operation's outcome waits this long for its instance's next write to carry it, then it
# is written on its own (a parallel stage whose siblings run on). A crash inside this window
# runs the operation again, as a crash before its own commit would.
OPERATION_WRITE_DELAY_SECONDS = 0.01


_new_outcome = builder(OperationOutcome)  # one per operation (record_builders.py)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineCalls:
    """The Engine's own calls that a handler's tools make for it, as the Engine makes them:
    `enqueue_child(parent_id, name, params, key)` returns the child's id, and
    `signal(instance_id, name, payload, idempotency_key)` whether the signal was accepted."""

    enqueue_child: Callable[[UUID, str, JSONValue, str | None], Awaitable[UUID]]
    signal: Callable[[UUID, str, JSONValue, str | None], Awaitable[bool]]


class RunnerTools:
    """The InstanceTools of one running instance: store calls fenced by this owner.

    Operation outcomes are kept until the instance's next write carries them (a template's
    last operation of a stage is recorded with the stage's checkpoint, in one commit), or
    written on their own through the group commit: before the next operation of a sequence
    starts, or OPERATION_WRITE_DELAY_SECONDS after they finished unless the caller said its
    next write carries them (`carried`: a sequence, whose next write comes before anything
    waits; a parallel stage's siblings run on, so its outcomes get the timer). A write of
    outcomes on their own also carries the running stage's report as of then (its `report`),
    so that the instance shows how far the stage got while it runs. The finished operations
    are read once per run (never for a new instance, which has none) and kept up to date
    here.
    """

    def __init__(
        self,
        store: Store,
        owner_id: str,
        record: InstanceRecord,
        engine_calls: EngineCalls,
        observer: EngineObserver,
        committer: Committer,
    ) -> None:
        self._store = store
        self._owner_id = owner_id
        self._instance_id = record.instance_id
        self._name = record.name
        self._epoch = record.lease_epoch
        self._engine_calls = engine_calls
        self._observer = observer
        self._committer = committer
        # First claim of a new instance: nothing can have been recorded for it yet.
        self._finished: dict[tuple[str, int], OperationRecord] | None = (
            {} if record.attempts == 1 else None
        )
        self._unwritten: list[OperationOutcome] = []
        # The running stage's report, asked only when outcomes are written on their own: a
        # stage whose outcomes its step's write carries (the usual) never makes one here.
        self._report: Callable[[], StageReport] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._writing: asyncio.Task[None] | None = None

    async def finished_operations(self) -> list[OperationRecord]:
        if self._finished is None:
            rows = await self._store.operations(self._instance_id)
            self._finished = {(row.stage, row.position): row for row in rows}
        return list(self._finished.values())

    async def record_operation(
        self,
        operation: OperationRecord,
        *,
        seconds: float,
        encoded: tuple[str, str] | None = None,
        carried: bool = False,
        report: Callable[[], StageReport] | None = None,
    ) -> None:
        if encoded is None:
            encoded = (
                encode_json(operation.data, what="operation data"),
                encode_json(operation.metadata, what="operation metadata"),
            )
        finished_at = time.monotonic()
        self._unwritten.append(
            _new_outcome(
                record=operation,
                data_json=encoded[0],
                metadata_json=encoded[1],
                seconds=seconds,
                finished_at=finished_at,
            )
        )
        if self._finished is not None:
            self._finished[(operation.stage, operation.position)] = operation
        if report is not None:
            self._report = report
        self._observer.operation_finished(self._name, operation.type, operation.status, seconds)
        if self._timer is None and not carried:
            self._timer = asyncio.get_running_loop().call_at(
                finished_at + OPERATION_WRITE_DELAY_SECONDS, self._write_later
            )

    async def write_operations(self) -> None:
        """Write the outcomes kept so far now (raises LeaseLostError when the lease is gone)."""
        if not self._unwritten:
            return
        # The stage's report as of now, which counts every outcome recorded so far: the
        # instance shows how far the running stage got, not the stage before's end.
        stage, progress, message = (None, None, None) if self._report is None else self._report()
        outcomes = self._take()
        try:
            await self._committer.write(
                OperationsWrite(
                    instance_id=self._instance_id,
                    epoch=self._epoch,
                    operations=outcomes,
                    stage=stage,
                    progress=progress,
                    message=message,
                )
            )
        except LeaseLostError:
            raise
        except Exception:
            self._unwritten[:0] = outcomes  # the step's own write carries them, or fails too
            raise

    async def carried(self) -> tuple[OperationOutcome, ...]:
        """The outcomes not written yet, for the step's own write to carry (after a write of
        them that is in flight, which must not come after the step's)."""
        if self._writing is not None:
            await asyncio.wait([self._writing])
        self._report = None  # the step reports for itself; the next stage brings its own
        return self._take()

    def _take(self) -> tuple[OperationOutcome, ...]:
        # The timer stays armed: when it fires it looks at what is unwritten then (one timer
        # per instance's burst of operations, not one set and cancelled per operation).
        outcomes, self._unwritten = tuple(self._unwritten), []
        return outcomes

    def _write_later(self) -> None:
        self._timer = None
        if not self._unwritten:
            return
        due = self._unwritten[0].finished_at + OPERATION_WRITE_DELAY_SECONDS
        if due > time.monotonic():  # the oldest came after the timer was set: wait for it
            self._timer = asyncio.get_running_loop().call_at(due, self._write_later)
            return
        self._writing = asyncio.create_task(self._write_in_background())

    async def _write_in_background(self) -> None:
        try:
            await self.write_operations()
        except Exception as exc:  # the step's write meets the same lease or database
            logger.info(
                "operation outcomes not written yet",
                extra={"instance_id": str(self._instance_id), "error": repr(exc)},
            )

    async def enqueue_child(self, name: str, params: JSONValue, *, key: str | None = None) -> UUID:
        return await self._engine_calls.enqueue_child(self._instance_id, name, params, key)

    async def signal(
        self,
        instance_id: UUID,
        name: str,
        payload: JSONValue = None,
        *,
        idempotency_key: str | None = None,
    ) -> bool:
        return await self._engine_calls.signal(instance_id, name, payload, idempotency_key)

    async def acquire_lock(
        self, entity_type: str, entity_id: str, ttl_seconds: float
    ) -> LockRecord | None:
        return await self._store.acquire_lock(
            entity_type, entity_id, self._instance_id, ttl_seconds
        )

    async def release_lock(self, lock: LockRecord) -> bool:
        return await self._store.release_lock(lock)
