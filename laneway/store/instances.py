"""The Store's instance area: instance reads, and the API side's writes (queues: queues.py).

Owns enqueueing (one statement per batch: rows, `enqueued` events and the doorbell, tried
again after a deadlock; a batch without keys is copied in, the bulk path) and the lookups that
resolve idempotency and singleton keys (a key that gave way to a singleton key is bound to
its holder). The order a batch's rows go in is key_order.py's.
Cancel, resume and retry are bulk.py's (one instance is their batch of one).
"""

import asyncio
import random
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Protocol
from uuid import UUID

import asyncpg

from laneway.errors import InvalidInputError
from laneway.model import (
    EnqueueResult,
    InstanceFilter,
    InstanceRecord,
    NewInstance,
    Status,
    WaitingReason,
)
from laneway.store import queries
from laneway.store.base import EVENTS_LOCK_KEY
from laneway.store.key_order import in_lock_order, repeated_keys
from laneway.store.queues import QueueStore
from laneway.store.rows import (
    Conn,
    instance_from_row,
    jsonb_value,
    new_instance_record,
    waiting_reason_from_row,
)

# From this many instances without keys, a batch is copied in (COPY, the bulk insert path)
# rather than inserted by the statement; below it, the statement's one round trip is cheaper.
COPY_FROM = 64
RECORDS_BETWEEN_TURNS = 100  # records built between the copy task's turns on the loop
COPY_CHUNK = 100  # instances per COPY of a batch copied in, each copied while the next is read
DEADLOCK_ATTEMPTS = 5  # tries of one write that deadlocked with another writer (bulk.py's too)
DEADLOCK_PAUSE_SECONDS = 0.005  # before the second try; doubled before each one after


async def after_deadlock(attempt: int) -> None:
    """Wait before trying again a write that lost a deadlock (its `attempt`-th try). The
    writer that won is woken when the loser's locks go; tried again at once, the loser can
    take a row the winner wants next before the winner runs (a loaded machine), and make the
    same cycle again: seen three times in a row in a full test run. A random pause, longer
    each time, lets the winner finish first."""
    await asyncio.sleep(DEADLOCK_PAUSE_SECONDS * 2 ** (attempt - 1) * random.uniform(0.5, 1.5))


def _copied_instance(new: NewInstance, run_after: datetime) -> tuple[object, ...]:
    """A copied instance's values, in queries.COPIED_INSTANCE_COLUMNS' order."""
    return (
        new.instance_id,
        new.name,
        new.queue,
        new.priority,
        new.max_attempts,
        run_after,
        new.params_json,
        new.first_action,
        new.params_json,
        new.parent_id,
        new.trace_context,
        new.version,
    )


class Keys(Protocol):
    """What decides whether an enqueue can conflict with a row that exists: its keys (a
    NewInstance, or the engine's EnqueueRequest before it is checked)."""

    @property
    def idempotency_key(self) -> str | None: ...
    @property
    def singleton_key(self) -> str | None: ...
    @property
    def concurrency_key(self) -> str | None: ...


def keyless(item: Keys) -> bool:
    """Nothing but its fresh id could make it conflict with another row: no idempotency,
    singleton or concurrency key."""
    return (
        item.idempotency_key is None and item.singleton_key is None and item.concurrency_key is None
    )


def _run_after(new: NewInstance, now: datetime) -> datetime:
    """When a copied instance is due: the transaction's now() plus its delay."""
    return now + timedelta(milliseconds=new.delay_ms) if new.delay_ms else now


def _chunks(batch: Iterable[NewInstance], size: int) -> Iterator[list[NewInstance]]:
    chunk: list[NewInstance] = []
    for new in batch:
        chunk.append(new)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


async def _settled(copying: "asyncio.Task[str] | None", *, cancel: bool) -> None:
    """A copy still running when its batch failed (a check of the next chunk, say), or was
    given up (`cancel`: then it is cancelled): waited for, so that the connection is at rest
    when the transaction rolls back and the connection goes back."""
    if copying is not None and not copying.done():
        if cancel:
            copying.cancel()
        await asyncio.gather(copying, return_exceptions=True)


def filter_args(where: InstanceFilter) -> tuple[object, ...]:
    """The values of queries.INSTANCE_FILTER's $1 ... $8, in order."""
    statuses = [s.value for s in where.statuses] if where.statuses is not None else None
    return (
        where.name,
        where.queue,
        statuses,
        where.parent_id,
        where.concurrency_key,
        where.version,
        where.created_after,
        where.created_before,
    )


class InstanceStore(QueueStore):
    """Instances, as the API side reads and changes them (their queues: QueueStore)."""

    # -- instance reads --------------------------------------------------------------------------

    async def cluster_figures(
        self,
    ) -> tuple[dict[str, dict[Status, int]], dict[str, float], frozenset[str]]:
        """Every queue's instances by status, as `queues` counts them (a status with none is
        left out; a queue with none has {}), the age in seconds of each queue's oldest ready
        instance, and the paused queues: for the metrics' cluster-wide snapshot."""
        queues = await self.queues()
        async with self._acquire() as conn:
            oldest = await conn.fetch(queries.OLDEST_READY)
        return (
            {queue.name: queue.counts for queue in queues},
            {row["queue"]: row["age_seconds"] for row in oldest},
            frozenset(queue.name for queue in queues if queue.paused),
        )

    async def get_instance(self, instance_id: UUID) -> InstanceRecord | None:
        async with self._acquire() as conn:
            row = await conn.fetchrow(queries.GET_INSTANCE, instance_id)
        return instance_from_row(row) if row else None

    async def waiting_reasons(
        self, instance_ids: Sequence[UUID], statuses: Sequence[str] | None = None
    ) -> dict[UUID, WaitingReason]:
        """Why each of these instances is not running, in one statement: the pending, paused
        and waiting ones only (running, terminal and unknown ids are not in the result). With
        `statuses` (one per id, as a caller read them before), only those still in theirs: a
        reason is never of a status other than the one shown beside it."""
        async with self._acquire() as conn:
            rows = await conn.fetch(queries.WAITING_REASONS, list(instance_ids))
        if statuses is not None:
            shown = dict(zip(instance_ids, statuses, strict=True))
            rows = [row for row in rows if row["status"] == shown[row["instance_id"]]]
        return {row["instance_id"]: waiting_reason_from_row(row) for row in rows}

    async def list_instances(
        self,
        where: InstanceFilter,
        *,
        limit: int,
        offset: int,
        summaries: bool = False,
        payloads: bool = True,
    ) -> list[InstanceRecord]:
        """Instances newest first; as summaries (`state` {}, `next_params` None: not read) when
        `summaries`; without `params`, `result` and `wait` (None: not read) unless `payloads`,
        summaries or full records."""
        statement = queries.list_instances_statement(summaries, payloads)
        async with self._acquire() as conn:
            rows = await conn.fetch(statement, *filter_args(where), limit, offset)
        return [instance_from_row(row) for row in rows]

    async def unregistered_pending(self, registered: Sequence[str]) -> dict[str, int]:
        """Due pending instances per workflow name that `registered` does not include."""
        async with self._acquire() as conn:
            rows = await conn.fetch(queries.UNREGISTERED_PENDING, list(registered))
        return {row["name"]: row["pending"] for row in rows}

    # -- instance writes from the API side -------------------------------------------------------

    async def enqueue(self, new: NewInstance) -> EnqueueResult:
        """Insert an instance with its `enqueued` event, or return the one its keys name."""
        if not keyless(new):
            (result,) = await self.enqueue_many([new])
            return result
        # Without keys it can only conflict on its fresh id: one insert, nothing to look up.
        # (The common call, whose latency is the rate of a client enqueuing one at a time.)
        async with self._acquire() as conn:
            await self._ensure_queue(conn, new.queue)
            (record,) = await self._insert(conn, [new])
        return EnqueueResult(instance=record, created=True)

    async def enqueue_many(self, batch: Sequence[NewInstance]) -> list[EnqueueResult]:
        """Enqueue instances with their `enqueued` events in one statement (one commit, one
        NOTIFY).

        Results come in the order of `batch`; an instance whose keys name an existing one
        returns that one, not created. The unique indexes decide races; a conflicting row that
        vanished before it could be read (a singleton that just ended) lets the next insert
        round through.
        """
        return await self.enqueue_checked(
            batch, size=len(batch), keyless=all(keyless(new) for new in batch)
        )

    async def enqueue_checked(
        self, batch: Iterable[NewInstance], *, size: int, keyless: bool
    ) -> list[EnqueueResult]:
        """`enqueue_many` of a batch the caller checks as it is read: `size` instances, none
        with a key when `keyless`, as the caller knows before checking them. A batch that is
        copied in is read chunk by chunk while the copy of the chunk before runs, so the
        checks and the database's work overlap; if reading it raises, nothing is written
        and the error goes on. Any other batch is read whole first."""
        if keyless and size >= COPY_FROM:
            return await self._copy_in(batch)
        todo = list(batch)
        if not todo:
            return []
        async with self._acquire() as conn:
            for queue in {new.queue for new in todo}:
                await self._ensure_queue(conn, queue)
            return await self._enqueue_on(conn, todo)

    async def _copy_in(self, batch: Iterable[NewInstance]) -> list[EnqueueResult]:
        """Copy instances without keys and their `enqueued` events in, in one transaction, and
        ring the doorbell: what ENQUEUE_INSTANCES does, at the bulk path's speed. Their run_after
        is the transaction's now() plus the delay (the database clock, as the statement has it);
        everything else a record holds is what was copied.

        The instances go in COPY_CHUNK at a time, each chunk's copy running on the connection
        while the next is read from `batch` (a caller's checks), and their records are built
        while the database takes their events in: a batch costs about the larger of the
        caller's, this process's and the database's work, not their sum. Queues the batch
        names that this store has not made yet are made in the same transaction (an instance
        row needs none: no foreign key, 0007), and known here only once it committed."""
        copied: list[tuple[NewInstance, datetime]] = []
        async with self._acquire() as conn, conn.transaction():
            now = await conn.fetchval(queries.DB_NOW)
            copying: asyncio.Task[str] | None = None
            try:
                for chunk in _chunks(batch, COPY_CHUNK):  # a caller's checks may raise here
                    rows = [(new, _run_after(new, now)) for new in chunk]
                    copied += rows
                    if copying is not None:
                        await copying
                    copying = asyncio.create_task(
                        conn.copy_records_to_table(
                            "instances",
                            schema_name="laneway",
                            columns=queries.COPIED_INSTANCE_COLUMNS,
                            records=[_copied_instance(new, at) for new, at in rows],
                        )
                    )
                    await asyncio.sleep(0)  # its turn: it sends the chunk before the next is read
                if copying is not None:
                    await copying
            except BaseException as exc:
                await _settled(copying, cancel=not isinstance(exc, Exception))
                raise
            if not copied:
                return []
            made = {new.queue for new, _ in copied} - self._known_queues
            for queue in sorted(made):
                await conn.execute(queries.ENSURE_QUEUE, queue)
            events = [
                (new.instance_id, new.name, "enqueued", "pending", now, 0) for new, _ in copied
            ]
            await conn.execute(queries.LOCK_EVENT_APPENDS, EVENTS_LOCK_KEY)
            copying = asyncio.create_task(
                conn.copy_records_to_table(
                    "events",
                    schema_name="laneway",
                    columns=queries.COPIED_EVENT_COLUMNS,
                    records=events,
                )
            )
            try:
                records = []
                for index, (new, at) in enumerate(copied):
                    if index % RECORDS_BETWEEN_TURNS == 0:
                        await asyncio.sleep(0)  # the copy's turn: its answers, its next rows
                    fields = {"params": jsonb_value(new.params_json), "created_at": now}
                    fields["run_after"] = at
                    records.append(new_instance_record(new, fields))
                await copying
            except BaseException as exc:
                await _settled(copying, cancel=not isinstance(exc, Exception))
                raise
            await conn.fetchrow(queries.RING_AFTER_COPIED_EVENTS)
        self._known_queues |= made
        return [EnqueueResult(instance=record, created=True) for record in records]

    async def _enqueue_on(self, conn: Conn, batch: Sequence[NewInstance]) -> list[EnqueueResult]:
        found: dict[UUID, EnqueueResult] = {}
        repeats = repeated_keys(batch)  # each given what the first with its key is given
        todo = in_lock_order([new for new in batch if new.instance_id not in repeats])
        for _ in range(5):
            for record in await self._insert_retried(conn, todo):
                found[record.instance_id] = EnqueueResult(instance=record, created=True)
            skipped = [n for n in todo if n.instance_id not in found]
            todo = []
            for new in skipped:
                # The insert takes requests that share a key in request order (in_lock_order),
                # so a request never conflicted with an instance a later one created: as one
                # call after another would have it.
                existing = await self._find_by_keys(conn, new)
                if existing is None:
                    todo.append(new)
                else:
                    found[new.instance_id] = EnqueueResult(instance=existing, created=False)
            if not todo:
                return [
                    EnqueueResult(instance=found[repeats[new.instance_id]].instance, created=False)
                    if new.instance_id in repeats
                    else found[new.instance_id]
                    for new in batch
                ]
        raise InvalidInputError("enqueue kept conflicting with a concurrent change; try again")

    async def _insert_retried(
        self, conn: Conn, todo: Sequence[NewInstance]
    ) -> list[InstanceRecord]:
        """`_insert`, tried again after a deadlock or serialization failure (rows whose two
        kinds of key cross another batch's: in_lock_order), at most DEADLOCK_ATTEMPTS times.

        Safe because the statement is its own transaction: the failure rolled all of it back,
        its rows, the key rows it made or held, its events and the doorbell (a NOTIFY goes
        only at commit), so the next try starts from nothing, with the same ids. Inside a
        caller's transaction (a schedule's fire) the error goes to the caller, whose
        transaction is what failed."""
        for attempt in range(1, DEADLOCK_ATTEMPTS + 1):
            try:
                return await self._insert(conn, todo)
            except (
                asyncpg.exceptions.DeadlockDetectedError,
                asyncpg.exceptions.SerializationError,
            ):
                if attempt == DEADLOCK_ATTEMPTS or conn.is_in_transaction():
                    raise
            await after_deadlock(attempt)
        raise AssertionError("unreachable")

    async def _insert(self, conn: Conn, todo: Sequence[NewInstance]) -> list[InstanceRecord]:
        """Insert the instances with their events; those whose keys conflict are left out."""
        if len(todo) == 1 and todo[0].concurrency_key is None:
            new = todo[0]
            keyed = new.idempotency_key is not None or new.singleton_key is not None
            row = await conn.fetchrow(
                queries.ENQUEUE_INSTANCE if keyed else queries.ENQUEUE_INSTANCE_WITHOUT_KEYS,
                new.instance_id,
                new.name,
                new.queue,
                new.priority,
                new.max_attempts,
                new.delay_ms,
                new.params_json,
                new.first_action,
                new.idempotency_key,
                new.singleton_key,
                new.parent_id,
                EVENTS_LOCK_KEY,
                new.trace_context,
                new.version,
            )
            return [] if row is None else [new_instance_record(new, row)]
        rows = await conn.fetch(
            queries.ENQUEUE_INSTANCES,
            [n.instance_id for n in todo],
            [n.name for n in todo],
            [n.queue for n in todo],
            [n.priority for n in todo],
            [n.max_attempts for n in todo],
            [n.delay_ms for n in todo],
            [n.params_json for n in todo],
            [n.first_action for n in todo],
            [n.idempotency_key for n in todo],
            [n.singleton_key for n in todo],
            [n.parent_id for n in todo],
            EVENTS_LOCK_KEY,
            [n.concurrency_key for n in todo],
            [n.trace_context for n in todo],
            [n.version for n in todo],
        )
        inserted = {new.instance_id: new for new in todo}
        return [new_instance_record(inserted[row["instance_id"]], row) for row in rows]

    async def _find_by_keys(self, conn: Conn, new: NewInstance) -> InstanceRecord | None:
        """The instance `new` gives way to: its idempotency key's, else its singleton key's;
        None if neither is there any more (the caller tries the insert again).

        Given way to a singleton key's holder, the idempotency key is bound to the holder, so
        that the key answers with it from then on, as with any instance the key returned: the
        same request tried again once the holder ended would otherwise create an instance
        under the key (an outside audit). The key may have been taken meanwhile (an instance
        with it as its own, or another binding): then the key's instance is the answer."""
        key = new.idempotency_key
        if key is not None:
            row = await conn.fetchrow(queries.FIND_BY_IDEMPOTENCY_KEY, key)
            if row is not None:
                return instance_from_row(row)
        if new.singleton_key is None:
            return None
        row = await conn.fetchrow(queries.FIND_ACTIVE_SINGLETON, new.name, new.singleton_key)
        if row is None:
            return None
        holder = instance_from_row(row)
        if key is None:
            return holder
        bound = await conn.fetchval(queries.BIND_IDEMPOTENCY_KEY, key, holder.instance_id)
        if bound is None:
            return None  # the holder is gone
        if bound == holder.instance_id:
            return holder
        row = await conn.fetchrow(queries.GET_INSTANCE, bound)
        return instance_from_row(row) if row else None
