"""Committer: the group commit of runner writes.

Owns batching: one flush at a time writes every write queued meanwhile (step writes and
template operations' outcomes of every runner here) in one transaction, and the next batch is
sent the moment the answer to the one before is in. A batch the database refused for what it
held (not because it went away) is written again one write per transaction, so that one
write's fault fails that write alone. Also the hand-back of an instance whose write failed
because the database went away, and, when tracing, the span of a claim that rode on a commit
(tracing.claim_span). What a write means: laneway/writes.py.
"""

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeGuard
from uuid import UUID

from laneway.engine import faults, tracing
from laneway.engine.failures import type_name
from laneway.errors import LeaseLostError, StepWriteRefusedError
from laneway.model import GroupCommit, Transition
from laneway.store import Store
from laneway.store.leases import RELEASED_AFTER_DATABASE_LOSS
from laneway.store.pool import DATABASE_GONE
from laneway.writes import RunnerWrite, ends_run

HAND_BACK_FIRST_DELAY_SECONDS = 0.05
HAND_BACK_MAX_DELAY_SECONDS = 1.0

_Queued = tuple[RunnerWrite, "asyncio.Future[Transition | None]"]


@dataclass(slots=True, kw_only=True)
class _Flight:
    """A batch sent to the database: its writes, its rider's token and claim limit, and the
    statement in flight."""

    batch: list[_Queued]
    token: int
    limit: int
    answer: "asyncio.Task[GroupCommit]"
    sent_ns: int = 0  # when it was sent (wall clock), for its claim's span; 0: not traced


class ClaimRider(Protocol):
    """Who claims the room a group commit frees, in the commit's own transaction (the claim
    loop): the next claim rides on the commit instead of costing a round trip of its own."""

    def room(self, freed: int) -> tuple[Sequence[str], int]:
        """The run keys to claim and how many instances at most (0: no claim), given that
        `freed` of this batch's writes end their run here."""
        ...

    def writing(self) -> int:
        """A batch is being written; returns its token for `committed`."""
        ...

    def committed(
        self, token: int, commit: GroupCommit | None, limit: int, traced: str | None
    ) -> None:
        """The batch committed (`limit`: what its claim asked for), or failed (None); start
        what it claimed (`traced`: its claim's span, when traced, for its steps' links)."""
        ...


class Committer:
    """Group commit for runner writes: a flusher task writes everything queued, one batch in
    flight at a time, until nothing is queued."""

    def __init__(
        self,
        store: Store,
        owner_id: str,
        lease_seconds: float,
        rider: ClaimRider | None = None,
        tracing: bool = False,
    ) -> None:
        self._store = store
        self._owner_id = owner_id
        self._lease_seconds = lease_seconds
        self._rider = rider
        self._tracing = tracing  # a claim that rides on a commit is a span (tracing.py)
        self._queued: list[_Queued] = []
        self._alone: list[_Queued] = []  # of a refused batch: each sent in a batch of its own
        self._flusher: asyncio.Task[None] | None = None

    async def write(self, item: RunnerWrite) -> Transition:
        """Apply one write (batched with whatever else is ready).

        Raises:
            LeaseLostError: the instance is no longer ours (lease taken over, or cancelled).
        """
        future: asyncio.Future[Transition | None] = asyncio.get_running_loop().create_future()
        self._queued.append((item, future))
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush_all(), name="laneway-group-commit")
        # A cancelled runner stops waiting and cancels its future; its write stays queued, and
        # the batch it is in goes on for the others (a done future is skipped when the answer
        # is handed out: _settle, _fail). No shield: it cost an outer future, two callbacks
        # and a turn of the loop per write.
        transition = await future
        if transition is None:
            raise LeaseLostError(item.instance_id)
        return transition

    async def hand_back(self, instance_id: UUID, epoch: int) -> bool:
        """After a write failed because the database went away: wait for it (backing off)
        and hand the instance back at once, fenced by this lease, so that it resumes from its
        last checkpoint now instead of after its lease. Whether the write had committed is
        unknown: a step is never recorded twice this way, at most run again. Gives up when
        the lease would have run out meanwhile (lease recovery takes it from there).

        Returns whether it was handed back (False: fenced out, or given up).
        """
        deadline = time.monotonic() + self._lease_seconds
        delay = HAND_BACK_FIRST_DELAY_SECONDS
        while time.monotonic() < deadline:
            try:
                released = await self._store.release(
                    self._owner_id, {instance_id: epoch}, reason=RELEASED_AFTER_DATABASE_LOSS
                )
            except DATABASE_GONE:
                await asyncio.sleep(min(delay, max(deadline - time.monotonic(), 0.0)))
                delay = min(delay * 2, HAND_BACK_MAX_DELAY_SECONDS)
                continue
            return bool(released)
        return False

    async def _flush_all(self) -> None:
        """Flush until nothing is queued, one batch in flight at a time. The next batch (what
        was queued while one was in flight) is sent as soon as that one's answer is in, before
        the answer is handled: the runs its claim took start, and its runners go on, while the
        database takes the next batch, so a busy engine keeps the database busy instead of
        waiting for this process between batches."""
        # One turn of the event loop lets the other runners that are ready now queue their
        # writes too, so the first writer does not commit alone.
        await asyncio.sleep(0)
        flights: list[_Flight] = []  # sent, their answers not handed out yet; oldest first
        try:
            while flights or self._queued or self._alone:
                if not flights:
                    flights.append(self._send())
                try:
                    commit: GroupCommit | Exception = await flights[0].answer
                except Exception as exc:
                    commit = exc
                if _refused(commit) and len(flights[0].batch) > 1:
                    # Its claim rolled back with it; its writes go again, one per batch, first.
                    self._alone += flights[0].batch
                    flights[0].batch = []
                if self._queued or self._alone:
                    flights.append(self._send())
                    await asyncio.sleep(0)  # the next batch's statement goes out first
                await self._settle(flights[0], commit)
                del flights[0]
        except BaseException as exc:  # cancelled (the loop closes), or a bug: none may wait on
            for flight in flights:
                flight.answer.cancel()
                if self._rider is not None:
                    self._rider.committed(flight.token, None, flight.limit, None)
            left = [q for flight in flights for q in flight.batch] + self._alone + self._queued
            self._queued, self._alone = [], []
            if isinstance(exc, Exception):
                _fail(left, exc)
            else:
                for _, future in left:
                    future.cancel()
            raise
        finally:
            self._flusher = None

    def _send(self) -> _Flight:
        """Send everything queued as one batch, with the claim the rider asks to ride on it;
        or, while a refused batch's writes are left, the next of them alone (no claim rides
        on it: the loop claims the room it frees)."""
        alone = bool(self._alone)
        if alone:
            batch = [self._alone.pop(0)]
        else:
            batch, self._queued = self._queued, []
        writes = [item for item, _ in batch]
        rider = self._rider
        token = rider.writing() if rider is not None else 0
        freed = sum(1 for item in writes if ends_run(item))
        runs, limit = rider.room(freed) if rider is not None and not alone else ((), 0)
        answer = asyncio.ensure_future(
            self._store.commit_runner_batch(
                self._owner_id, self._lease_seconds, writes, runs=runs, claim_limit=limit
            )
        )
        sent_ns = time.time_ns() if self._tracing and limit else 0
        return _Flight(batch=batch, token=token, limit=limit, answer=answer, sent_ns=sent_ns)

    async def _settle(self, flight: _Flight, commit: GroupCommit | Exception) -> None:
        """Hand a batch's answer out: the rider starts what it claimed, then each write's
        runner gets its transition (None: fenced out), or the error of the batch (a refusal
        as StepWriteRefusedError, the database's error its cause)."""
        rider = self._rider
        try:
            if rider is not None:
                done = None if isinstance(commit, Exception) else commit
                claimed_by = None
                if flight.sent_ns and done is not None and done.claimed:
                    claimed_by = tracing.claim_span(flight.sent_ns, flight.limit, done.claimed)
                rider.committed(flight.token, done, flight.limit, claimed_by)
            if _refused(commit):  # a batch of one by now (_flush_all): this write's own fault
                raise StepWriteRefusedError(
                    f"the database refused this step's write: {type_name(commit)}: {commit}"
                ) from commit
            if isinstance(commit, Exception):
                raise commit
            if faults.ARMED:
                await faults.hit("after_checkpoint_commit")
        except Exception as exc:
            _fail(flight.batch, exc)
            return
        by_id = {t.instance_id: t for t in commit.transitions}  # a step's row comes after its rows'
        for item, future in flight.batch:
            if not future.done():
                future.set_result(by_id.get(item.instance_id))


def _refused(commit: GroupCommit | Exception) -> TypeGuard[Exception]:
    """The database answered the batch with an error of its own (a value it would not take, a
    constraint, a timeout): not a lost connection, after which the writes are handed back."""
    return isinstance(commit, Exception) and not isinstance(commit, DATABASE_GONE)


def _fail(batch: list[_Queued], exc: BaseException) -> None:
    for _, future in batch:
        if not future.done():
            future.set_exception(exc)
