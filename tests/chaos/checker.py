"""The offline history checker (docs/reliability.md): Jepsen's total-queue checker, adapted.

Owns the judgement of one chaos run, as a pure function of its history: the client's enqueue
log, the instances as stored, the audit rows of every UPDATE, the side-effect ledger and the
supervisor's fault journal. Every instance is classified as

- ok: enqueued, ended as expected (the oracle), none of the below;
- lost: the client saw `enqueue ok` but the instance is not terminal (or paused) at the end;
- unexpected: stored but never enqueued by the client;
- double-terminal: more than one terminal event, or more than one move into a terminal status;
- stale-written: an UPDATE made by worker X's connection to a row whose OLD.owner_id is not X,
  other than a claim from pending, a recovery of an expired lease, or an API verb (cancel,
  resume, retry), which any process may perform;
- unexplained duplicate: a ledger (instance, step) run more than once where some extra run is
  not matched by a run whose owner suffered a recorded fault (killed, stopped, terminated,
  partitioned, armed with a fault point, or its lease on that instance lost or released);
- wrong result: ended, but not as the oracle says;
- duplicate checkpoint: a completed instance with more checkpoint (or pause) events than its
  workflow has step boundaries (the ambiguous-commit check of R-05).

It also measures reclaim latency, `recovery time − last renewal` (the renewal is the write
that set the expired lease: OLD.lease_expires_at − lease), which must lie within
[lease, lease + tick + 2 s] (I6), except for recoveries that overlap a declared outage; and a
late one counts only if some worker was up (between its first write and its next fault) for
a whole tick after the lease expired: with every worker dead or booting, nobody can reap.
"""

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from uuid import UUID

from tests.chaos.ledger import TERMINAL, AuditRow, FinalInstance, LedgerRow, StoredHistory

ENGINE_ROLES = ("serve", "worker", "engine")
PROCESS_FAULTS = frozenset({"kill", "stop", "term", "died", "partition", "armed"})
RECLAIM_SLACK_SECONDS = 2.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Incident:
    """One entry of the fault journal: what happened to which owner, when (host clock)."""

    owner_id: str
    kind: str
    at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class History:
    """Everything one run left behind."""

    enqueued: Mapping[UUID, object]  # instance id → params, for `enqueue ok`
    uncertain: frozenset[UUID] = frozenset()  # enqueue outcome unknown (timeout, error)
    stored: StoredHistory
    incidents: Sequence[Incident] = ()
    outages: Sequence[tuple[datetime, datetime]] = ()
    lease_seconds: float
    tick_seconds: float
    step_boundaries: int | None = None  # checkpoints a completed instance has (W3, WP: 2)


Oracle = Callable[[FinalInstance, object], bool]


@dataclass(slots=True, kw_only=True)
class Verdict:
    """The checker's classification and figures for one run."""

    ok: set[UUID] = field(default_factory=set)
    lost: set[UUID] = field(default_factory=set)
    unexpected: set[UUID] = field(default_factory=set)
    recovered: set[UUID] = field(default_factory=set)
    double_terminal: set[UUID] = field(default_factory=set)
    stale_writes: list[AuditRow] = field(default_factory=list)
    unexplained_duplicates: list[tuple[UUID, str]] = field(default_factory=list)
    wrong_result: set[UUID] = field(default_factory=set)
    duplicate_checkpoints: set[UUID] = field(default_factory=set)
    duplicate_runs: int = 0
    reclaim_seconds: list[float] = field(default_factory=list)
    premature: list[tuple[UUID, float]] = field(default_factory=list)
    late: list[tuple[UUID, float]] = field(default_factory=list)
    unjudged_late: int = 0  # late reclaims while no worker was up (all dead or booting)

    @property
    def stale_written(self) -> set[UUID]:
        return {row.instance_id for row in self.stale_writes}

    @property
    def passed(self) -> bool:
        """I1–I4 and I6: nothing lost, doubled, stale, unexplained, wrong, early or late."""
        return not (
            self.lost
            or self.unexpected
            or self.double_terminal
            or self.stale_writes
            or self.unexplained_duplicates
            or self.wrong_result
            or self.duplicate_checkpoints
            or self.premature
            or self.late
        )

    def summary(self) -> str:
        latency = (
            f"{min(self.reclaim_seconds):.2f}-{max(self.reclaim_seconds):.2f}s"
            if self.reclaim_seconds
            else "-"
        )
        return (
            f"ok={len(self.ok)} lost={len(self.lost)} unexpected={len(self.unexpected)} "
            f"double_terminal={len(self.double_terminal)} stale={len(self.stale_writes)} "
            f"unexplained_dup={len(self.unexplained_duplicates)} "
            f"wrong={len(self.wrong_result)} dup_checkpoints={len(self.duplicate_checkpoints)} "
            f"dup_runs={self.duplicate_runs} "
            f"reclaim={latency} premature={len(self.premature)} late={len(self.late)}"
            f" (+{self.unjudged_late} with no worker up)"
        )


def writer_owner(application_name: str) -> str | None:
    """The owner id in `laneway-<role>-<owner>`, for an engine connection; else None."""
    prefix, _, rest = application_name.partition("-")
    role, _, owner = rest.partition("-")
    if prefix != "laneway" or role not in ENGINE_ROLES or not owner:
        return None
    return owner


def _is_exempt(row: AuditRow) -> bool:
    """Writes any process may make to a row it does not own."""
    claim = row.old_status == "pending" and row.new_status == "running"
    recovery = (
        row.old_status == "running"
        and row.old_lease_expires_at is not None
        and row.old_lease_expires_at < row.at
    )
    cancel = row.new_status == "cancelled" and row.old_status not in TERMINAL
    resume = row.old_status == "paused" and row.new_status == "pending"
    retry = row.old_status == "failed" and row.new_status == "pending"
    return claim or recovery or cancel or resume or retry


def stale_writes(audit: Sequence[AuditRow]) -> list[AuditRow]:
    """Updates by a worker's connection to a row it did not own, outside the exemptions."""
    stale = []
    for row in audit:
        owner = writer_owner(row.application_name)
        if owner is not None and row.old_owner != owner and not _is_exempt(row):
            stale.append(row)
    return stale


def is_recovery(row: AuditRow) -> bool:
    """A running instance taken from its owner by someone else (not a release, not a cancel)."""
    return (
        row.old_status == "running"
        and row.old_owner is not None
        and writer_owner(row.application_name) != row.old_owner
        and row.new_status != "cancelled"
    )


def _overlaps(start: datetime, end: datetime, windows: Sequence[tuple[datetime, datetime]]) -> bool:
    return any(start <= w_end and w_start <= end for w_start, w_end in windows)


def working_windows(history: History) -> list[tuple[datetime, datetime]]:
    """When some worker was up: from its first write (it claims, so it also reaps) until it
    was killed, stopped, partitioned, terminated or died; a SIGCONT or a heal restarts one."""
    first_write: dict[str, datetime] = {}
    for row in history.stored.audit:
        owner = writer_owner(row.application_name)
        if owner is not None and owner not in first_write:
            first_write[owner] = row.at
    windows = []
    for owner, started in first_write.items():
        start: datetime | None = started
        for incident in sorted(history.incidents, key=lambda i: i.at):
            if incident.owner_id != owner or incident.at < started:
                continue
            if incident.kind in PROCESS_FAULTS - {"armed"} | {"exit"} and start is not None:
                windows.append((start, incident.at))
                start = None
            elif incident.kind in ("cont", "heal") and start is None:
                start = incident.at
        if start is not None:
            windows.append((start, datetime.max.replace(tzinfo=started.tzinfo)))
    return windows


def _someone_working(
    start: datetime, end: datetime, windows: Sequence[tuple[datetime, datetime]]
) -> bool:
    return any(w_start <= start and end <= w_end for w_start, w_end in windows)


def _judge_reclaims(history: History, verdict: Verdict) -> None:
    lease = timedelta(seconds=history.lease_seconds)
    tick = timedelta(seconds=history.tick_seconds)
    bound = lease + tick + timedelta(seconds=RECLAIM_SLACK_SECONDS)
    windows = working_windows(history)
    for row in history.stored.audit:
        if not is_recovery(row) or row.old_lease_expires_at is None:
            continue
        renewed_at = row.old_lease_expires_at - lease
        if _overlaps(renewed_at, row.at, history.outages):
            continue  # the database was down meanwhile: the bound is not about that
        elapsed = row.at - renewed_at
        seconds = elapsed.total_seconds()
        verdict.reclaim_seconds.append(seconds)
        if elapsed < lease:
            verdict.premature.append((row.instance_id, seconds))
        elif elapsed > bound:
            expired = row.old_lease_expires_at
            if _someone_working(expired, expired + tick, windows):
                verdict.late.append((row.instance_id, seconds))
            else:
                verdict.unjudged_late += 1  # no worker was up to reap it in time


def _faulted(history: History) -> tuple[set[str], set[tuple[UUID, str]]]:
    """Owners with a process-level fault, and (instance, owner) pairs whose lease was lost."""
    owners = {i.owner_id for i in history.incidents if i.kind in PROCESS_FAULTS}
    leases = set()
    for row in history.stored.audit:
        if row.old_owner is None:
            continue
        released = row.old_status == "running" and row.new_status == "pending"
        if is_recovery(row) or released:
            leases.add((row.instance_id, row.old_owner))
    return owners, leases


def _judge_duplicates(history: History, verdict: Verdict) -> None:
    owners, leases = _faulted(history)
    runs: dict[tuple[UUID, str], list[LedgerRow]] = defaultdict(list)
    for row in history.stored.ledger:
        runs[(row.instance_id, row.step)].append(row)
    for key, group in runs.items():
        extra = len(group) - 1
        if extra <= 0:
            continue
        verdict.duplicate_runs += extra
        explained = sum(
            1 for run in group if run.owner_id in owners or (key[0], run.owner_id) in leases
        )
        if extra > explained:
            verdict.unexplained_duplicates.append(key)


def _terminal_moves(audit: Sequence[AuditRow]) -> dict[UUID, int]:
    moves: dict[UUID, int] = defaultdict(int)
    for row in audit:
        if row.new_status in TERMINAL and row.old_status not in TERMINAL:
            moves[row.instance_id] += 1
    return moves


def check(history: History, oracle: Oracle) -> Verdict:
    """Classify every instance of `history`; `oracle(final, params)` says if it ended right."""
    verdict = Verdict()
    stored = history.stored.instances
    expected = set(history.enqueued)
    for instance_id in expected - set(stored):
        verdict.lost.add(instance_id)
    for instance_id, final in stored.items():
        if instance_id in expected:
            if final.status not in (*TERMINAL, "paused"):
                verdict.lost.add(instance_id)
            elif not oracle(final, history.enqueued[instance_id]):
                verdict.wrong_result.add(instance_id)
        elif instance_id in history.uncertain:
            verdict.recovered.add(instance_id)
        else:
            verdict.unexpected.add(instance_id)
    moves = _terminal_moves(history.stored.audit)
    for instance_id, final in stored.items():
        if final.terminal_events > 1 or moves.get(instance_id, 0) > 1:
            verdict.double_terminal.add(instance_id)
        judged = history.step_boundaries is not None and final.status == "completed"
        if judged and final.checkpoint_events != history.step_boundaries:
            verdict.duplicate_checkpoints.add(instance_id)
    verdict.stale_writes = stale_writes(history.stored.audit)
    _judge_duplicates(history, verdict)
    _judge_reclaims(history, verdict)
    bad = (
        verdict.lost
        | verdict.unexpected
        | verdict.double_terminal
        | verdict.stale_written
        | {instance_id for instance_id, _ in verdict.unexplained_duplicates}
        | verdict.wrong_result
        | verdict.duplicate_checkpoints
    )
    verdict.ok = (set(stored) & (expected | history.uncertain)) - bad
    return verdict


def describe(verdict: Verdict, history: History, per_category: int = 3) -> str:
    """The summary plus a few examples of each failed category, for assertion messages."""
    lines = [verdict.summary()]
    instances = history.stored.instances
    categories: dict[str, list[UUID]] = {
        "lost": sorted(verdict.lost),
        "unexpected": sorted(verdict.unexpected),
        "double_terminal": sorted(verdict.double_terminal),
        "stale": sorted(verdict.stale_written),
        "unexplained_dup": sorted({i for i, _ in verdict.unexplained_duplicates}),
        "wrong": sorted(verdict.wrong_result),
        "dup_checkpoints": sorted(verdict.duplicate_checkpoints),
        "late": sorted({i for i, _ in verdict.late}),
    }
    for name, ids in categories.items():
        for instance_id in ids[:per_category]:
            final = instances.get(instance_id)
            state = f"{final.status} {final.last_error!r}" if final else "missing"
            owners = [
                (row.old_status, row.new_status, row.application_name, row.at.time().isoformat())
                for row in history.stored.audit
                if row.instance_id == instance_id
            ]
            lines.append(f"{name} {instance_id}: {state} {owners[-6:]}")
    return "\n".join(lines)
