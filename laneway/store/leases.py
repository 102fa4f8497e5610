"""The Store's lease area: claims, leases, the runners' group commit, retention, entity locks.

Owns every write fenced by an owner id (and lease epoch): the claim that sets them, lease
renewal, release and recovery, the group commit of runner writes, and the entity locks that
template operations take with fencing tokens.
"""

import contextlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from uuid import UUID

from laneway.model import (
    DueWork,
    EventType,
    FailureRecord,
    GroupCommit,
    InstanceRecord,
    LockRecord,
    NewEvent,
    ScheduleRecord,
    Status,
    Transition,
)
from laneway.store import queries
from laneway.store.base import EVENTS_LOCK_KEY, StoreBase
from laneway.store.rows import (
    Conn,
    Row,
    failure_from_row,
    instance_from_row,
    lock_from_row,
    transition_from_row,
)
from laneway.store.schedules import skipped_columns
from laneway.writes import (
    CheckpointWrite,
    CompleteWrite,
    FailWrite,
    OperationsWrite,
    RunnerWrite,
)

DEFAULT_MAX_RECOVERIES = 3  # lost workers tolerated per instance before it is dead-lettered
RELEASED_AT_SHUTDOWN = "released: worker shutting down"
RELEASED_AFTER_DATABASE_LOSS = "released: its runner lost the database"


@dataclass(frozen=True, slots=True, kw_only=True)
class NextToken:
    """When a rate-limited queue can next start an instance (store.next_token_due)."""

    rate_limited: bool  # some unpaused queue has a rate limit at all
    due_in: float | None  # seconds until its next whole token (0: now); None: nothing waits


class LeaseStore(StoreBase):
    """Claims, leases and everything a lease holder writes."""

    # -- claims and leases -----------------------------------------------------------------------

    async def claim(
        self, owner_id: str, runs: Sequence[str], limit: int, lease_seconds: float
    ) -> list[InstanceRecord]:
        """Claim up to `limit` due instances within every queue's caps, across processes."""
        claimed, _ = await self.claim_rung(owner_id, runs, limit, lease_seconds)
        return claimed

    async def claim_rung(
        self, owner_id: str, runs: Sequence[str], limit: int, lease_seconds: float
    ) -> tuple[list[InstanceRecord], int | None]:
        """`claim`, and the event id its doorbell rang with (None: it claimed nothing), so
        the claimer can tell its own claim's NOTIFY from news of other transactions."""
        if limit <= 0 or not runs:
            return [], None
        async with self._acquire() as conn:
            rows = await conn.fetch(
                queries.CLAIM, owner_id, list(runs), limit, lease_seconds, EVENTS_LOCK_KEY
            )
        return [instance_from_row(row) for row in rows], _rung(rows)

    async def due_work(
        self, runs: Sequence[str], skipped_schedules: Sequence[ScheduleRecord] = ()
    ) -> DueWork:
        """One statement telling an idle engine which kinds of work are waiting (of its
        schedules, all but those it skips: ScheduleStore.fire_due_schedules)."""
        async with self._acquire() as conn:
            names = sorted({run.partition("@")[0] for run in runs})  # run_key's name@version
            row = await conn.fetchrow(
                queries.DUE_WORK, list(runs), names, *skipped_columns(skipped_schedules)
            )
        assert row is not None
        return DueWork(
            expired_leases=row["expired_leases"],
            claimable=row["claimable"],
            next_wake_in=row["next_wake_in"],
            next_schedule_in=row["next_schedule_in"],
        )

    async def next_token_due(self, runs: Sequence[str]) -> NextToken:
        """One read: when the next token of a rate-limited queue with room and due work is due."""
        async with self._acquire() as conn:
            row = await conn.fetchrow(queries.NEXT_TOKEN_DUE, list(runs))
        assert row is not None
        return NextToken(rate_limited=row["rate_limited"], due_in=row["next_token_in"])

    async def recover_expired_leases(
        self, limit: int = 500, *, max_recoveries: int = DEFAULT_MAX_RECOVERIES
    ) -> list[Transition]:
        """Return instances whose lease ran out to pending.

        An instance out of attempts, or whose worker was already lost `max_recoveries` times
        (dead-lettered), ends failed instead. The lost attempt names the stage that was
        running: a template's (one with operation rows) is the stage of its next action.
        """
        async with self._acquire() as conn, conn.transaction():
            rows = await conn.fetch(queries.RECOVER_EXPIRED_LEASES, limit, max_recoveries)
            transitions = [transition_from_row(row) for row in rows]
            await self._release_locks_of_terminal(conn, transitions)
            await self._record_failures(conn, transitions)
            await self._append_events(conn, [_recovery_event(t) for t in transitions])
        return transitions

    async def prune_finished(self, retention_seconds: float, limit: int = 5000) -> int:
        """Delete up to `limit` instances that ended over `retention_seconds` ago, with their
        operations and their events in the default partition (the others go with their
        partition: retire_event_partitions); returns how many went."""
        async with self._acquire() as conn:
            rows = await conn.fetch(queries.PRUNE_FINISHED, retention_seconds, limit)
        return len(rows)

    async def renew_leases(
        self, owner_id: str, leases: Mapping[UUID, int], lease_seconds: float
    ) -> set[UUID]:
        """Extend the leases (instance id → lease epoch) this owner still holds.

        Returns the ids still held.
        """
        if not leases:
            return set()
        async with self._acquire() as conn:
            rows = await conn.fetch(
                queries.RENEW_LEASES, owner_id, list(leases), list(leases.values()), lease_seconds
            )
        return {row["instance_id"] for row in rows}

    async def release(
        self, owner_id: str, leases: Mapping[UUID, int], *, reason: str = RELEASED_AT_SHUTDOWN
    ) -> list[Transition]:
        """Hand unfinished instances (id → lease epoch) back, at shutdown or when their runner
        lost the database; the attempt is given back to its step's budget. `reason` is the
        `retrying` event's error (store/queries/history_rollup.py counts neither as a retry)."""
        if not leases:
            return []
        async with self._acquire() as conn, conn.transaction():
            rows = await conn.fetch(
                queries.RELEASE_INSTANCES, owner_id, list(leases), list(leases.values())
            )
            transitions = [transition_from_row(row) for row in rows]
            await self._append_events(
                conn,
                [
                    NewEvent(
                        instance_id=t.instance_id,
                        name=t.name,
                        type=EventType.RETRYING,
                        status=t.status,
                        attempt=t.attempts,
                        error=reason,
                    )
                    for t in transitions
                ],
            )
        return transitions

    async def write_runner_batch(
        self, owner_id: str, lease_seconds: float, writes: Sequence[RunnerWrite]
    ) -> list[Transition]:
        """Apply many runners' writes in one transaction; writes whose lease is lost do nothing.

        Returns one transition per applied write (a missing instance id means fenced out; an
        instance with operation rows and a step write here has two, the step's last).
        """
        return (await self.commit_runner_batch(owner_id, lease_seconds, writes)).transitions

    async def commit_runner_batch(
        self,
        owner_id: str,
        lease_seconds: float,
        writes: Sequence[RunnerWrite],
        *,
        runs: Sequence[str] = (),
        claim_limit: int = 0,
    ) -> GroupCommit:
        """`write_runner_batch`, with the event id its doorbell rang with; and, when
        `claim_limit` > 0, a claim of up to that many instances of `runs` (as `claim`) in the
        same transaction, after the writes, so that it fills the room they freed."""
        args = runner_batch_args(owner_id, lease_seconds, writes)
        signal_waits = [
            w.instance_id for w in writes if isinstance(w, CheckpointWrite) and _waits_for_signal(w)
        ]
        claiming = claim_limit > 0 and bool(runs)
        async with self._acquire() as conn, _transaction_if(conn, bool(signal_waits)):
            if claiming:
                rows = await conn.fetch(
                    queries.WRITE_RUNNER_BATCH_AND_CLAIM, *args, list(runs), claim_limit
                )
            else:
                rows = await conn.fetch(queries.WRITE_RUNNER_BATCH, *args)
            if signal_waits:
                # A signal kept before its wait, or sent while the wait was being written, is
                # seen by this statement's snapshot, which comes after the waits' row locks.
                await self._consume_signals(conn, signal_waits)
        if not claiming:
            return GroupCommit(
                transitions=[transition_from_row(row) for row in rows], rung=_rung(rows)
            )
        written = [row for row in rows if row["claimed"] is None]
        claimed = [row["claimed"] for row in rows if row["claimed"] is not None]
        return GroupCommit(
            transitions=[transition_from_row(row) for row in written],
            rung=_rung(written),
            claimed=[instance_from_row(row) for row in claimed],
            claim_rung=rows[-1]["last_event_id"] if claimed else None,
        )

    async def failures(
        self, instance_ids: Sequence[UUID], limit: int
    ) -> dict[UUID, list[FailureRecord]]:
        """The newest `limit` failed attempts of each of these instances, newest first."""
        async with self._acquire() as conn:
            rows = await conn.fetch(queries.FAILURES_OF, list(instance_ids), limit)
        found: dict[UUID, list[FailureRecord]] = {instance_id: [] for instance_id in instance_ids}
        for row in rows:
            found[row["instance_id"]].append(failure_from_row(row))
        return found

    async def _release_locks_of_terminal(
        self, conn: Conn, transitions: Sequence[Transition]
    ) -> None:
        ended = [t.instance_id for t in transitions if t.status.is_terminal]
        if ended:
            await conn.execute(queries.RELEASE_INSTANCE_LOCKS, ended)

    # -- entity locks ----------------------------------------------------------------------------

    async def acquire_lock(
        self, entity_type: str, entity_id: str, owner_instance: UUID, ttl_seconds: float
    ) -> LockRecord | None:
        """Take the lock if it is free, expired, or already this owner's; else None."""
        async with self._acquire() as conn:
            row = await conn.fetchrow(
                queries.ACQUIRE_LOCK, entity_type, entity_id, owner_instance, ttl_seconds
            )
        return lock_from_row(row) if row else None

    async def release_lock(self, lock: LockRecord) -> bool:
        """Release a lock still held under its fencing token; False if it was lost."""
        async with self._acquire() as conn:
            token = await conn.fetchval(
                queries.RELEASE_LOCK, lock.entity_type, lock.entity_id, lock.fencing_token
            )
        return token is not None

    async def current_lock(self, entity_type: str, entity_id: str) -> LockRecord | None:
        async with self._acquire() as conn:
            row = await conn.fetchrow(queries.GET_LOCK, entity_type, entity_id)
        return lock_from_row(row) if row else None


def runner_batch_args(
    owner_id: str, lease_seconds: float, writes: Sequence[RunnerWrite]
) -> tuple[object, ...]:
    """The arguments of queries.WRITE_RUNNER_BATCH (laneway.write_runner_batch, its operation
    outcomes as one JSON text) for `writes`, in its parameters' order."""
    checkpoints = [w for w in writes if isinstance(w, CheckpointWrite)]
    completions = [w for w in writes if isinstance(w, CompleteWrite)]
    failures = [w for w in writes if isinstance(w, FailWrite)]
    # One report per instance, the latest (a batch may hold two writes of one instance's
    # outcomes: one written in the background, then the next before it was sent). Where the
    # batch holds the instance's step write, the statement leaves the instance to that one.
    reports = list(
        {
            w.instance_id: w
            for w in writes
            if isinstance(w, OperationsWrite) and w.stage is not None
        }.values()
    )
    return (
        owner_id,
        lease_seconds,
        EVENTS_LOCK_KEY,
        [w.instance_id for w in checkpoints],
        _column([w.state_json for w in checkpoints]),
        _column([w.next_action for w in checkpoints]),
        _column([w.next_params_json for w in checkpoints]),
        _column([w.progress for w in checkpoints]),
        _column([w.message for w in checkpoints]),
        _column([w.stage for w in checkpoints]),
        _column([w.pause_label for w in checkpoints]),
        _column([w.epoch for w in checkpoints]),
        _column([w.attempt for w in checkpoints]),
        [w.instance_id for w in completions],
        _column([w.result_json for w in completions]),
        _column([w.state_json for w in completions]),
        _column([w.epoch for w in completions]),
        [w.instance_id for w in failures],
        _column([w.error for w in failures]),
        _column([w.delay_ms for w in failures]),
        _column([w.final for w in failures]),
        _column([w.epoch for w in failures]),
        _column([w.wait_json for w in checkpoints]),
        _column([w.type for w in failures]),
        _column([w.message for w in failures]),
        _column([w.traceback for w in failures]),
        _column([w.stage for w in failures]),
        _column([w.operation for w in failures]),
        _column([w.trace for w in failures]),
        _column([w.stage for w in completions]),
        _column([w.message for w in completions]),
        _outcomes(writes),
        _column([w.trace for w in checkpoints]),
        _column([w.trace for w in completions]),
        _column([w.progress for w in failures]),
        _column([w.report for w in failures]),
        _column([w.instance_id for w in reports]),
        _column([w.epoch for w in reports]),
        _column([w.stage for w in reports]),
        _column([w.progress for w in reports]),
        _column([w.message for w in reports]),
    )


def _outcomes(writes: Sequence[RunnerWrite]) -> str | None:
    """The operation outcomes `writes` carry, as the one JSON text the statement takes apart
    (queries.WRITE_RUNNER_BATCH says its shape); None when they carry none.

    Formatted here rather than by the JSON encoder, at half its cost (an outcome was ~33k CPU
    instructions through json.dumps, ~17k here; two thirds of json.dumps's were its two
    floats): ids as 32 hex digits (what str() gives, less its dashes), times in whole
    microseconds (the database keeps no finer), texts quoted by the encoder's own quoting, and
    the data and metadata as they are: JSON already, checked when they were encoded.
    """
    now = time.monotonic()
    outcomes = [
        _OUTCOME
        % (
            w.instance_id.int,
            w.epoch,
            (record := o.record).operation_id.int,
            _quoted(record.stage),
            record.position,
            _quoted(record.type),
            _quoted(record.status),
            record.attempts,
            "null" if record.error is None else _quoted(record.error),
            o.data_json,
            o.metadata_json,
            round(o.seconds * 1e6),
            round(max(now - o.finished_at, 0.0) * 1e6),
            record.fix_cycle,
        )
        for w in writes
        for o in w.operations
    ]
    return f"[{','.join(outcomes)}]" if outcomes else None


_OUTCOME = '["%032x",%d,"%032x",%s,%d,%s,%s,%d,%s,%s,%s,%d,%d,%d]'
_quoted = json.encoder.encode_basestring_ascii  # a JSON string, non-ASCII as \u escapes


def _column(values: list[object]) -> list[object] | None:
    """A column of the batch as its array argument, or NULL when every value in it is None:
    the statement unnests its columns side by side, which pads a NULL one with NULLs, and
    asyncpg checks each element of an array it sends (an isinstance of an ABC, two for a
    text), which a NULL spares."""
    return None if values.count(None) == len(values) else values


def _waits_for_signal(write: CheckpointWrite) -> bool:
    return write.wait_json is not None and json.loads(write.wait_json).get("kind") == "signal"


def _transaction_if(conn: Conn, needed: bool) -> contextlib.AbstractAsyncContextManager[object]:
    """A transaction around several statements; one statement is its own."""
    return conn.transaction() if needed else contextlib.nullcontext()


def _recovery_event(t: Transition) -> NewEvent:
    """The event of a recovered lease: retrying from the checkpoint, or failed for good.

    (Runner writes name their events in laneway.write_runner_batch itself; its text is in
    laneway/store/sql/functions.sql.)
    """
    return NewEvent(
        instance_id=t.instance_id,
        name=t.name,
        type=EventType.RETRYING if t.status == Status.PENDING else EventType.FAILED,
        status=t.status,
        attempt=t.attempts,
        error=t.error,
        stage=t.stage,
        checkpoint=t.checkpoint,
    )


def _rung(rows: Sequence[Row]) -> int | None:
    """The doorbell's event id a claim's or a group commit's rows carry (None: no row)."""
    return rows[0]["last_event_id"] if rows else None
