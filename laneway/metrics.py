"""Prometheus metrics of one process, in the text format, with the official client library.

Owns the series and how they are fed. Per process: the engine's observer hooks
(engine/observer.py) count attempts started and how they ended, time steps, operations and
the wait from enqueue to start, and count claims and what upkeep did (instances pruned,
event partitions added and retired, failed rounds); the event hub's and the pool's own
counters are read at scrape time (metrics_collectors.py). Cluster-wide: instances by queue
and status, and the age of the oldest ready instance of each queue, read from the database at
most once per `refresh_seconds` (whatever the number of scrapes and series) and served from
that snapshot;
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

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import metrics as client_metrics
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from laneway.engine.observer import UPKEEP_TASKS, UpkeepTask
from laneway.errors import LanewayError, os_error_reason
from laneway.events import EventHub
from laneway.host_names import AllowedHosts
from laneway.metrics_collectors import ClusterCollector, ProcessCollector, Snapshot
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
        # Upkeep runs every few seconds at most, so the client's own series are cheap enough.
        self._pruned = Counter(
            "laneway_instances_pruned",
            "Finished instances past retention that this process deleted.",
            registry=self.registry,
        )
        self._prune_behind = Gauge(
            "laneway_prune_behind",
            "1 while this process's last retention batch came back full (instances past "
            "retention are left; its sweep comes back within seconds), else 0.",
            registry=self.registry,
        )
        self._partitions_added = Counter(
            "laneway_event_partitions_added",
            "Event log partitions this process added ahead.",
            registry=self.registry,
        )
        self._partitions_retired = Counter(
            "laneway_event_partitions_retired",
            "Event log partitions this process dropped once retention had emptied them.",
            registry=self.registry,
        )
        self._upkeep_failures = Counter(
            "laneway_upkeep_failures",
            "Upkeep rounds of this process that failed, by task (unregistered, prune, "
            "partitions, queue_history); each is logged as a warning and tried again at its "
            "next round.",
            ("task",),
            registry=self.registry,
        )
        for task in UPKEEP_TASKS:  # at 0 from the start, so increase() sees the first failure
            self._upkeep_failures.labels(task)
        self._snapshot = Snapshot(begun=clock())
        self._reading: asyncio.Task[None] | None = None  # the snapshot read under way, if any
        self._process = ProcessCollector()
        self.registry.register(self._process)
        self.registry.register(
            ClusterCollector(self._snapshot, clock, refresh_seconds, stale_seconds)
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

    def pruned(self, count: int, behind: bool) -> None:
        self._pruned.inc(count)
        self._prune_behind.set(1.0 if behind else 0.0)

    def partitions_added(self, count: int) -> None:
        self._partitions_added.inc(count)

    def partitions_retired(self, count: int) -> None:
        self._partitions_retired.inc(count)

    def upkeep_failed(self, task: UpkeepTask) -> None:
        self._upkeep_failures.labels(task).inc()

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
        logged; the cluster series are left out once it is stale_seconds old (Snapshot.served).
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


async def _request_head(reader: asyncio.StreamReader) -> tuple[bytes, list[str]]:
    """A request's first line and its Host values (at most two: one is right).

    Raises:
        ValueError: a line over the reader's limit.
    """
    hosts: list[str] = []
    request = await reader.readline()
    while line := (await reader.readline()).strip():
        name, _, value = line.decode("latin-1").partition(":")
        if name.strip().lower() == "host" and len(hosts) < 2:
            hosts.append(value.strip())
    return request, hosts


@contextlib.asynccontextmanager
async def metrics_server(
    metrics: Metrics,
    store: Store,
    *,
    host: str,
    port: int,
    given_by: str = "LANEWAY_METRICS_PORT",
    allowed: AllowedHosts | None = None,
) -> AsyncIterator[None]:
    """Serve GET /metrics on host:port for the duration of the block: a worker's metrics,
    which has no HTTP server otherwise. A query string is ignored (Prometheus's `params` add
    one), HEAD answers as GET does without the body, another method is 405 with an Allow
    header, and any other path is 404. No authentication: bind it where only the scraper
    reaches (127.0.0.1 by default). A request whose Host `allowed` does not allow (None: any;
    AllowedHosts.for_metrics) is 400, so that a page on a rebound name cannot read it. It
    listens before the block starts, so a port in use stops the process before its engine
    runs, with a line that names `given_by`: what gave the port (the variable, or `laneway
    worker --metrics-port`).

    Raises:
        LanewayError: host:port cannot be listened on (in use, not of this machine).
    """

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                async with asyncio.timeout(10):
                    request, hosts = await _request_head(reader)
            except ValueError:  # a line over the reader's limit (64 KiB): nothing more is read
                request, hosts = b"", []
                too_long = True
            else:
                too_long = False
            parts = request.decode("latin-1").split()
            method, target = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
            extra = ""
            served = writer.get_extra_info("sockname")
            if too_long:
                status, kind, body = "431 Request Header Fields Too Large", "text/plain", b""
            elif allowed is not None and (
                len(hosts) != 1 or not allowed.allows_header(hosts[0], served[:2])
            ):
                status, kind, body = "400 Bad Request", "text/plain", b"unknown host\n"
            elif target.partition("?")[0] != "/metrics":
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
