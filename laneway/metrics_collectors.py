"""The series a scrape reads as they are: the event hub's and the pool's own counters, and the
cluster-wide figures from the snapshot that laneway/metrics.py keeps (instances by queue and
status, the oldest ready instance's age, paused queues, and the snapshot's own age).

Owns how those figures become metric families, and when a snapshot is too old to be served.
Does not read the database: Metrics.refresh does, and fills the Snapshot.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from laneway.events import EventHub
from laneway.model import Status
from laneway.store import Store


@dataclass(slots=True)
class Snapshot:
    """The cluster-wide figures as last read, and how their reads went (monotonic times)."""

    begun: float  # when this process began to keep them: their age before the first read
    counts: dict[str, dict[Status, int]] = field(default_factory=dict)  # every queue
    oldest_ready: dict[str, float] = field(default_factory=dict)
    paused: frozenset[str] = frozenset()
    read_at: float | None = None  # when the read of these figures began
    failed: bool = False  # the last read that ended failed
    reading_since: float | None = None  # when the read under way began

    def age(self, now: float) -> float:
        return now - (self.begun if self.read_at is None else self.read_at)

    def served(self, now: float, stale_seconds: float) -> bool:
        """Whether the figures may still be exported: unless they are more than stale_seconds
        old and the read meant to replace them failed, or has been running that long."""
        if self.read_at is None:
            return False
        if now - self.read_at <= stale_seconds:
            return True
        hung = self.reading_since is not None and now - self.reading_since > stale_seconds
        return not (self.failed or hung)


class ProcessCollector(Collector):
    """The event hub's and the pool's own counters, read as they are at scrape time."""

    def __init__(self) -> None:
        self.source: tuple[EventHub, Store] | None = None

    def collect(self) -> Iterable[Metric]:
        subscribers = GaugeMetricFamily(
            "laneway_subscribers", "Event stream subscribers connected to this process."
        )
        listener = GaugeMetricFamily(
            "laneway_listener_connected", "1 while this process's LISTEN connection is up."
        )
        reconnects = CounterMetricFamily(
            "laneway_listener_reconnects", "Times the LISTEN connection was re-established."
        )
        delivered = CounterMetricFamily(
            "laneway_events_delivered", "Events handed to this process's subscribers."
        )
        in_use = GaugeMetricFamily(
            "laneway_pool_connections_in_use", "Pooled database connections lent out now."
        )
        idle = GaugeMetricFamily(
            "laneway_pool_connections_idle", "Pooled database connections open and idle."
        )
        if self.source is not None:
            hub, store = self.source
            subscribers.add_metric([], hub.subscriber_count)
            listener.add_metric([], 1.0 if hub.is_connected else 0.0)
            reconnects.add_metric([], hub.reconnect_count)
            delivered.add_metric([], hub.delivered_count)
            lent, resting = store.pool_counts()
            in_use.add_metric([], lent)
            idle.add_metric([], resting)
        return [subscribers, listener, reconnects, delivered, in_use, idle]


class ClusterCollector(Collector):
    """Instances by queue and status, the oldest ready instance's age and whether each queue is
    paused, from the snapshot, with the snapshot's age.

    Every status of every queue the snapshot knows has its series, 0 when no instance is in
    it: a series that vanished when its count fell to 0 would leave a graph at its last value
    and an alert on it unresolved. A snapshot that could not be read again is not served as
    if it were fresh: its age is exported, and once it is stale the series are left out.
    """

    def __init__(
        self,
        snapshot: Snapshot,
        clock: Callable[[], float],
        refresh_seconds: float,
        stale_seconds: float,
    ) -> None:
        self._snapshot = snapshot
        self._clock = clock
        self._refresh_seconds = refresh_seconds
        self._stale_seconds = stale_seconds

    def collect(self) -> Iterable[Metric]:
        snapshot, now = self._snapshot, self._clock()
        age = GaugeMetricFamily(
            "laneway_cluster_snapshot_age_seconds",
            "Seconds since the read of the snapshot behind laneway_instances, "
            "laneway_oldest_ready_seconds and laneway_queue_paused began (since this process "
            "started, before its first "
            f"read); those are left out once it is over {self._stale_seconds:g} s old and its "
            "re-read failed or has run that long.",
        )
        age.add_metric([], max(snapshot.age(now), 0.0))
        instances = GaugeMetricFamily(
            "laneway_instances",
            "Instances by queue and status, across the cluster (a snapshot that a scrape "
            f"re-reads once it is {self._refresh_seconds:g} s old).",
            labels=("queue", "status"),
        )
        oldest = GaugeMetricFamily(
            "laneway_oldest_ready_seconds",
            "Age of the oldest ready (pending and due) instance of each queue, across the "
            "cluster; 0 when none is ready.",
            labels=("queue",),
        )
        paused = GaugeMetricFamily(
            "laneway_queue_paused",
            "1 while a queue is paused (pauseQueue: none of its instances starts), else 0.",
            labels=("queue",),
        )
        if snapshot.read_at is None or not snapshot.served(now, self._stale_seconds):
            return [age, instances, oldest, paused]
        for queue, counts in sorted(snapshot.counts.items()):
            for status in Status:
                instances.add_metric([queue, status.value], counts.get(status, 0))
        # The age grows while the snapshot ages; the next read sets it right again.
        since = max(now - snapshot.read_at, 0.0)
        for queue in sorted(set(snapshot.counts) | set(snapshot.oldest_ready)):
            ready = snapshot.oldest_ready.get(queue)
            oldest.add_metric([queue], 0.0 if ready is None else ready + since)
        for queue in sorted(snapshot.counts):
            paused.add_metric([queue], float(queue in snapshot.paused))
        return [age, instances, oldest, paused]
