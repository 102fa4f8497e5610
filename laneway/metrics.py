"""Prometheus metrics of one process, in the text format, with the official client library.

Owns the series and how they are fed. Per process: the engine's observer hooks
(engine/observer.py) count attempts started and how they ended, time steps, operations and
the wait from enqueue to start, and count claims; the event hub's and the pool's own counters
are read at scrape time. Cluster-wide: instances by queue and status, and the age of the
oldest ready instance of each queue, read from the database at most once per
`refresh_seconds` (whatever the number of scrapes and series) and served from that snapshot;
a scrape waits for that read at most `wait_seconds`, a slower one goes on in the background.
The snapshot's age is exported, and a snapshot that could not be read again is left out once
it is `stale_seconds` old.
Served by the API at /metrics (api/routes.py) and by a worker on LANEWAY_METRICS_PORT
(`metrics_server` below).
"""

import asyncio
import bisect
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client import metrics as client_metrics
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from laneway.errors import LanewayError, os_error_reason
from laneway.events import EventHub
from laneway.model import InstanceRecord, Status, Transition
from laneway.store import Store

logger = logging.getLogger(__name__)

CONTENT_TYPE = CONTENT_TYPE_LATEST
REFRESH_SECONDS = 5.0  # a scrape re-reads the cluster-wide snapshot once it is this old
WAIT_SECONDS = 2.0  # and waits for that read at most this long (Prometheus gives up at 10 s)
STALE_SECONDS = 15.0  # older, and its re-read failed or hangs: the cluster series are left out
STEP_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
BATCH_BUCKETS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500)
_OUTCOMES = {
    Status.COMPLETED: "completed",
    Status.FAILED: "failed",
    Status.CANCELLED: "cancelled",
    Status.PENDING: "retried",
}

_OUTCOME_HELP = {
    "completed": "Attempts of instances that completed in this process, by workflow and queue.",
    "failed": "Instances that failed for good, counted where their last attempt ran, where "
    "their lost lease was recovered (dead-lettered) or their wait timed out; by workflow and "
    "queue.",
    "retried": "Failed attempts that will run again, counted where they ran or where their "
    "lost lease was recovered; by workflow and queue.",
    "cancelled": "Instances cancelled by this process (the one that served the cancel, not "
    "the one running it), by workflow and queue.",
}


@dataclass(slots=True)
class _Snapshot:
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


class _Series(Collector):
    """A labelled counter or histogram of the hooks that run for every instance, step and
    operation, kept in plain numbers: an observation is a dict lookup, a bisect and two
    additions, where prometheus_client's own takes a lock for each of its bucket, sum and
    count and checks the metric on every call (about five times the cost, a few per cent of
    a no-op step). The hooks and the scrapes run on the event loop. A scrape gets the client's
    metric families, sample for sample what its Counter or Histogram would expose (`_total` or
    `_bucket`/`_count`/`_sum`, and `_created` unless the client's switch is off)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float] | None = None,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._bounds = tuple(float(bound) for bound in buckets or ())
        self._le = [repr(bound) for bound in self._bounds] + ["+Inf"]  # as the client writes le
        # labels -> [creation time, sum (or the counter's value), count per bucket...]
        self._values: dict[tuple[str, ...], list[float]] = {}

    def inc(self, *labels: str) -> None:
        values = self._values.get(labels)
        if values is None:
            values = self._values[labels] = [time.time(), 0.0]
        values[1] += 1.0

    def observe(self, value: float, *labels: str) -> None:
        values = self._values.get(labels)
        if values is None:
            values = self._values[labels] = [time.time(), 0.0] + [0.0] * len(self._le)
        values[1] += value
        values[2 + bisect.bisect_left(self._bounds, value)] += 1.0

    def collect(self) -> Iterable[Metric]:
        series = sorted(self._values.items())  # by labels; on the loop, nothing changes meanwhile
        with_created = _created_series()
        if not self._bounds:
            counter = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
            for labels, (created, value) in series:
                counter.add_metric(list(labels), value, created=created if with_created else None)
            return [counter]
        histogram = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, (created, total, *counts) in series:
            cumulative, buckets = 0.0, []
            for le, count in zip(self._le, counts, strict=True):
                cumulative += count
                buckets.append((le, cumulative))
            histogram.add_metric(list(labels), buckets, total)
            if with_created:
                histogram.samples.append(
                    Sample(
                        f"{self.name}_created",
                        dict(zip(self.labelnames, labels, strict=True)),
                        created,
                    )
                )
        return [histogram]


def _created_series() -> bool:
    """Whether the client library exports `_created` series now: PROMETHEUS_DISABLE_CREATED_SERIES
    (read when the library is imported) and its disable_created_metrics() turn them off for its
    own Counter and Histogram, so for _Series too. The library keeps that switch in a private
    global and offers no getter; the pinned version has it, and without it they stay on."""
    return bool(getattr(client_metrics, "_use_created", True))


class Metrics:
    """The metrics of one process: an EngineObserver, plus what the hub and pool report."""

    def __init__(
        self,
        *,
        refresh_seconds: float = REFRESH_SECONDS,
        wait_seconds: float = WAIT_SECONDS,
        stale_seconds: float = STALE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.refresh_seconds = refresh_seconds
        self.wait_seconds = wait_seconds
        self._clock = clock
        labels = ("workflow", "queue")
        # Who counts what (README, Metrics): an attempt's outcome the process that ran it, a
        # cancel the process that served it, a lost lease the process that recovered it.
        self._outcomes = {
            outcome: _Series(f"laneway_instances_{outcome}", documentation, labels)
            for outcome, documentation in _OUTCOME_HELP.items()
        }
        self._started = _Series(
            "laneway_instances_started",
            "Attempts started (claimed) by this process, by workflow and queue.",
            labels,
        )
        self._steps = _Series(
            "laneway_step_duration_seconds",
            "How long one handler call took, by workflow and action.",
            ("workflow", "action"),
            STEP_BUCKETS,
        )
        self._operations = _Series(
            "laneway_operation_duration_seconds",
            "How long one template operation took, by workflow, operation type and status.",
            ("workflow", "operation", "status"),
            STEP_BUCKETS,
        )
        self._enqueue_to_start = _Series(
            "laneway_enqueue_to_start_seconds",
            "From an instance's enqueue (or its due time, when delayed) to its first start.",
            labels,
            LATENCY_BUCKETS,
        )
        for series in (
            *self._outcomes.values(),
            self._started,
            self._steps,
            self._operations,
            self._enqueue_to_start,
        ):
            self.registry.register(series)
        self._claims = Counter(
            "laneway_claims", "Claims this process made.", registry=self.registry
        )
        self._claim_sizes = Histogram(
            "laneway_claim_batch_size",
            "Instances taken per claim.",
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )
        self._snapshot = _Snapshot(begun=clock())
        self._reading: asyncio.Task[None] | None = None  # the snapshot read under way, if any
        self._process = _ProcessCollector()
        self.registry.register(self._process)
        self.registry.register(
            _ClusterCollector(self._snapshot, clock, refresh_seconds, stale_seconds)
        )

    # -- the engine's observer -------------------------------------------------------------------

    def claimed(self, records: Sequence[InstanceRecord], lease_seconds: float) -> None:
        self._claims.inc()
        self._claim_sizes.observe(len(records))
        for record in records:
            self._started.inc(record.name, record.queue)
            if record.attempts == 1 and record.lease_expires_at is not None:
                started = record.lease_expires_at.timestamp() - lease_seconds
                waited = started - record.run_after.timestamp()
                self._enqueue_to_start.observe(max(waited, 0), record.name, record.queue)

    def step_finished(self, workflow: str, action: str, seconds: float) -> None:
        self._steps.observe(seconds, workflow, action)

    def operation_finished(
        self, workflow: str, operation: str, status: str, seconds: float
    ) -> None:
        self._operations.observe(seconds, workflow, operation, status)

    def transitioned(self, transition: Transition) -> None:
        outcome = _OUTCOMES.get(transition.status)
        if outcome is not None:
            self._outcomes[outcome].inc(transition.name, transition.queue)

    # -- what is read at scrape time -----------------------------------------------------------

    def watch(self, hub: EventHub, store: Store) -> None:
        """Report this hub's subscribers, listener and deliveries, and this store's pool."""
        self._process.source = (hub, store)

    async def refresh(self, store: Store, *, force: bool = False) -> None:
        """Bring the cluster-wide snapshot up to date when it is older than refresh_seconds (or
        when `force`), waiting for the read at most wait_seconds.

        This is stale-while-revalidate, as exporters of costly figures do: the read runs as a
        task of its own, one at a time (a scrape that finds one under way joins it), and a
        scrape that stops waiting, or is cancelled, leaves it running; its snapshot serves the
        next scrapes. Until then a scrape is served the snapshot there is, with its age
        (laneway_cluster_snapshot_age_seconds). A failed read keeps the last snapshot and is
        logged; the cluster series are left out once it is stale_seconds old (_Snapshot.served).
        """
        reading, snapshot = self._reading, self._snapshot
        if reading is None or reading.done():
            recent = snapshot.read_at is not None and (
                self._clock() - snapshot.read_at < self.refresh_seconds
            )
            if recent and not force:
                return
            reading = self._reading = asyncio.create_task(
                self._read(store), name="laneway-metrics-snapshot"
            )
        # asyncio.wait neither cancels the read at its timeout nor when this scrape is cancelled.
        await asyncio.wait({reading}, timeout=self.wait_seconds)

    async def _read(self, store: Store) -> None:
        snapshot = self._snapshot
        began = snapshot.reading_since = self._clock()  # the figures are as of the read's start
        try:
            counts, oldest, paused = await store.cluster_figures()
        except Exception as exc:
            logger.warning("metrics snapshot failed", extra={"error": repr(exc)})
            snapshot.failed = True
            return
        finally:
            snapshot.reading_since = None
        snapshot.counts, snapshot.oldest_ready, snapshot.paused = counts, oldest, paused
        snapshot.read_at, snapshot.failed = began, False

    async def aclose(self) -> None:
        """Stop a snapshot read still under way: it must not outlive the store it reads."""
        reading, self._reading = self._reading, None
        if reading is not None and not reading.done():
            reading.cancel()
            await asyncio.wait({reading})

    def render(self) -> bytes:
        """The metrics in the Prometheus text format (CONTENT_TYPE)."""
        return generate_latest(self.registry)


class _ProcessCollector(Collector):
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


class _ClusterCollector(Collector):
    """Instances by queue and status, the oldest ready instance's age and whether each queue is
    paused, from the snapshot, with the snapshot's age.

    Every status of every queue the snapshot knows has its series, 0 when no instance is in
    it: a series that vanished when its count fell to 0 would leave a graph at its last value
    and an alert on it unresolved. A snapshot that could not be read again is not served as
    if it were fresh: its age is exported, and once it is stale the series are left out.
    """

    def __init__(
        self,
        snapshot: _Snapshot,
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


@contextlib.asynccontextmanager
async def metrics_server(
    metrics: Metrics,
    store: Store,
    *,
    host: str,
    port: int,
    given_by: str = "LANEWAY_METRICS_PORT",
) -> AsyncIterator[None]:
    """Serve GET /metrics on host:port for the duration of the block: a worker's metrics,
    which has no HTTP server otherwise. A query string is ignored (Prometheus's `params` add
    one), HEAD answers as GET does without the body, another method is 405 with an Allow
    header, and any other path is 404. No authentication: bind it where only the scraper
    reaches (127.0.0.1 by default). It listens before the block starts, so a port in use
    stops the process before its engine runs, with a line that names `given_by`: what gave
    the port (the variable, or `laneway worker --metrics-port`).

    Raises:
        LanewayError: host:port cannot be listened on (in use, not of this machine).
    """

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):
                request = await reader.readline()
                while (await reader.readline()).strip():
                    pass  # headers: none matter
            parts = request.decode("latin-1").split()
            method, target = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
            extra = ""
            if target.partition("?")[0] != "/metrics":
                status, kind, body = "404 Not Found", "text/plain", b"not found\n"
            elif method not in ("GET", "HEAD"):
                status, kind, body = "405 Method Not Allowed", "text/plain", b"GET or HEAD\n"
                extra = "allow: GET, HEAD\r\n"
            else:
                await metrics.refresh(store)
                status, kind, body = "200 OK", CONTENT_TYPE, metrics.render()
            writer.write(
                f"HTTP/1.1 {status}\r\ncontent-type: {kind}\r\n{extra}"
                f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
            )
            if method != "HEAD":
                writer.write(body)
            await writer.drain()
        except (TimeoutError, ConnectionError, UnicodeDecodeError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    try:
        server = await asyncio.start_server(handle, host, port)
    except OSError as exc:
        raise LanewayError(
            f"cannot serve metrics on {host}:{port} ({given_by}): {os_error_reason(exc)}"
        ) from None
    # The port bound, not the one asked for: 0 is any free port, and the log is where it shows
    # (as `serve --port 0` logs its real URL).
    bound = server.sockets[0].getsockname()[1] if server.sockets else port
    logger.info("metrics served", extra={"host": host, "port": bound})
    async with server:
        yield
