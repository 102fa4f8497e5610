"""The Store's wait area: signals sent to instances, and the wake-up of waits whose time came.

Owns laneway.signals (a signal is kept until a wait of its name consumes it, once) and the
batched wake-up of sleeping, waiting and expiring paused instances, each one transaction with
its events. migrations/0016_waits.sql says why every consumer holds the instance's row lock.
For tests, also moves instances' timers (backoffs, delays, wake times) to now.
"""

from collections.abc import Sequence
from uuid import UUID

from laneway.errors import ConflictError, NotFoundError
from laneway.model import (
    EventType,
    InstanceRecord,
    JSONValue,
    NewEvent,
    SignalResult,
    Status,
    Transition,
)
from laneway.store import queries
from laneway.store.base import StoreBase
from laneway.store.rows import Conn, instance_from_row, transition_from_row

WAKE_BATCH = 1000  # instances woken per statement; a wake-up repeats while batches come back full

_WAKE_EVENTS = {
    Status.PENDING: EventType.RESUMED,
    Status.FAILED: EventType.FAILED,
    Status.CANCELLED: EventType.CANCELLED,
}


class WaitStore(StoreBase):
    """Signals, and the wake-up of instances whose wake time came."""

    async def send_signal(
        self,
        *,
        signal_id: UUID,
        instance_id: UUID,
        name: str,
        payload_json: str,
        idempotency_key: str | None,
    ) -> SignalResult:
        """Keep a signal for an instance, and hand it over at once if it waits for it.

        A second signal with the same idempotency key (per instance) is not kept: the result
        names the first one, with accepted False (also once the instance has ended).

        Raises:
            NotFoundError: no such instance.
            ConflictError: the instance has ended.
        """
        async with self._acquire() as conn, conn.transaction():
            status = await conn.fetchval(queries.LOCK_INSTANCE, instance_id)
            if status is None:
                raise NotFoundError(f"no instance {instance_id}")
            if idempotency_key is not None:
                # A repeat is answered as the first was, even once the instance has ended.
                earlier = await conn.fetchval(queries.FIND_SIGNAL, instance_id, idempotency_key)
                if earlier is not None:
                    record = await self._instance(conn, instance_id)
                    return SignalResult(signal_id=earlier, accepted=False, instance=record)
            if Status(status).is_terminal:
                raise ConflictError(instance_id, status, "signal")
            await conn.execute(
                queries.INSERT_SIGNAL, signal_id, instance_id, name, payload_json, idempotency_key
            )
            await self._consume_signals(conn, [instance_id])
            record = await self._instance(conn, instance_id)
        return SignalResult(signal_id=signal_id, accepted=True, instance=record)

    async def wake_due(self, limit: int = WAKE_BATCH) -> tuple[list[Transition], bool]:
        """Wake up to `limit` instances whose wake time came, in one transaction.

        Returns what each became (terminal ones for their hooks), and whether the batch was
        full (more may be due).
        """
        async with self._acquire() as conn, conn.transaction():
            rows = await conn.fetch(queries.WAKE_DUE, limit)
            woken = [transition_from_row(row) for row in rows if row["woken"]]
            ended = [t.instance_id for t in woken if t.status.is_terminal]
            if ended:
                await conn.execute(queries.RELEASE_INSTANCE_LOCKS, ended)
            failed = [t for t in woken if t.status == Status.FAILED]
            await self._record_failures(conn, failed)
            await self._append_events(
                conn,
                [
                    NewEvent(
                        instance_id=t.instance_id,
                        name=t.name,
                        type=_WAKE_EVENTS[t.status],
                        status=t.status,
                        attempt=t.attempts,
                        error=t.error if t.status == Status.FAILED else None,
                        stage=t.stage,
                    )
                    for t in woken
                ],
            )
        return woken, len(rows) >= limit

    async def pause_of(self, instance_id: UUID) -> tuple[str | None, JSONValue, int | None]:
        """The checkpoint a paused instance waits at, its input schema (None: none) and the
        most bytes its input may take encoded (None: the params limit), without the
        instance's state.

        Raises:
            NotFoundError: no such instance.
            ConflictError: it is not paused, or its checkpoint expired (though no engine has
                woken it yet: what the expiry does comes next, not a resume).
        """
        async with self._acquire() as conn:
            row = await conn.fetchrow(queries.PAUSE_OF, instance_id)
        if row is None:
            raise NotFoundError(f"no instance {instance_id}")
        if row["status"] != Status.PAUSED:
            raise ConflictError(instance_id, row["status"], "resume")
        if row["expired"]:
            reason = f"its checkpoint {row['checkpoint']!r} expired"
            raise ConflictError(instance_id, row["status"], "resume", reason=reason)
        return row["checkpoint"], row["input_schema"], row["max_input_bytes"]

    async def next_wake_in(self) -> float | None:
        """Seconds until the next wake-up of a waiting or paused instance (<= 0: due now;
        None: nothing will wake)."""
        async with self._acquire() as conn:
            seconds: float | None = await conn.fetchval(queries.NEXT_WAKE_IN)
        return seconds

    async def make_timers_due(self, instance_ids: Sequence[UUID] | None = None) -> int:
        """For tests (laneway.testing.make_timers_due): make the timers still to come of these
        instances (None: of every instance) due now, as if the time had passed.

        A pending instance's run_after (a retry's backoff, a delayed start) and a waiting or
        paused instance's wake_at (a sleep, a signal wait's timeout, a checkpoint's expiry)
        move to the database's now; nothing else is written, so the claim and wake_due take
        them by their usual paths. Running and ended instances are never touched. Returns how
        many instances had a timer moved.
        """
        ids = list(instance_ids) if instance_ids is not None else None
        async with self._acquire() as conn:
            moved = await conn.fetch(queries.MAKE_TIMERS_DUE, ids)
        return len(moved)

    async def _instance(self, conn: Conn, instance_id: UUID) -> InstanceRecord:
        row = await conn.fetchrow(queries.GET_INSTANCE, instance_id)
        assert row is not None  # locked by this transaction
        return instance_from_row(row)
