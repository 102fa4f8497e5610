"""Reading a run back from laneway.events, and the interval arithmetic the S-tests check.

Every time here is a database timestamp (`events.at` is clock_timestamp() at the append,
inside the transaction that made the change), never a clock of the test process.
"""

import itertools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from laneway.model import EventType, Status
from laneway.store import Store

TERMINAL_EVENTS = frozenset({EventType.COMPLETED, EventType.FAILED, EventType.CANCELLED})
# Events that end a run of an instance in a process: it is no longer running after them.
RUN_ENDS = TERMINAL_EVENTS | {EventType.RETRYING, EventType.PAUSED}

ALL_EVENTS = """
SELECT event_id, instance_id, type, at
  FROM laneway.events
 ORDER BY event_id
"""

STATUS_COUNTS = """
SELECT status, count(*) AS n
  FROM laneway.instances
 GROUP BY status
"""


@dataclass(frozen=True, slots=True)
class Event:
    event_id: int
    instance_id: UUID
    type: EventType
    at: datetime


Interval = tuple[datetime, datetime]


async def events_by_instance(store: Store) -> dict[UUID, list[Event]]:
    """Every event, grouped by instance, in event-id (commit) order."""
    async with store.connection() as conn:
        rows = await conn.fetch(ALL_EVENTS)
    grouped: dict[UUID, list[Event]] = defaultdict(list)
    for row in rows:
        event = Event(row["event_id"], row["instance_id"], EventType(row["type"]), row["at"])
        grouped[event.instance_id].append(event)
    return dict(grouped)


async def status_counts(store: Store) -> dict[Status, int]:
    async with store.connection() as conn:
        rows = await conn.fetch(STATUS_COUNTS)
    return {Status(row["status"]): row["n"] for row in rows}


def run_intervals(events: Sequence[Event]) -> list[Interval]:
    """[started, end of that run) for each run of one instance.

    A run still open at the end of the log (a worker killed, its lease not yet recovered)
    is left out; the tests wait for every instance to settle first.
    """
    intervals: list[Interval] = []
    started: datetime | None = None
    for event in events:
        if event.type == EventType.STARTED:
            assert started is None, f"started twice without an end: {event}"
            started = event.at
        elif event.type in RUN_ENDS and started is not None:
            intervals.append((started, event.at))
            started = None
    return intervals


def life_interval(events: Sequence[Event]) -> Interval:
    """[enqueued, terminal) of one settled instance: the span it holds its keys."""
    enqueued = [e.at for e in events if e.type == EventType.ENQUEUED]
    ended = [e.at for e in events if e.type in TERMINAL_EVENTS]
    assert len(enqueued) == 1, events
    assert len(ended) == 1, events
    return enqueued[0], ended[0]


def overlap_profile(intervals: Iterable[Interval]) -> list[tuple[datetime, int]]:
    """(instant, how many half-open intervals hold there) at every instant the count changes.

    An interval that ends at the instant another starts does not overlap it.
    """
    edges = sorted(
        [(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals],
        key=lambda edge: (edge[0], edge[1]),
    )
    profile: list[tuple[datetime, int]] = []
    held = 0
    for at, change in edges:
        held += change
        profile.append((at, held))
    return profile


def max_overlap(intervals: Iterable[Interval]) -> int:
    return max((held for _, held in overlap_profile(intervals)), default=0)


def busy_fraction(
    intervals: Sequence[Interval], slots: int, start: datetime, end: datetime
) -> float:
    """The share of `slots` × (end − start) that the intervals kept busy."""
    busy = timedelta(0)
    profile = overlap_profile(intervals)
    for (at, held), (next_at, _) in itertools.pairwise(profile):
        low, high = max(at, start), min(next_at, end)
        if high > low:
            busy += (high - low) * held
    return busy / ((end - start) * slots)
