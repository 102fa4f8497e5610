"""Prometheus metrics (issue #20, point 1): the counters move as workflows run, the cluster-wide
gauges come from a cached snapshot, and a worker serves them on its metrics port. Scraped and
parsed with the client library's own parser."""

import asyncio
import dataclasses
import logging
import signal
import socket
import sys
import uuid

import asyncpg
import httpx
import prometheus_client
import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from app.examples import flaky, hello
from laneway.config import Settings
from laneway.engine import Done, HandlerContext, Workflow
from laneway.errors import LanewayError
from laneway.host_names import AllowedHosts
from laneway.metrics import STEP_BUCKETS, Metrics, metrics_server
from laneway.model import JSONValue, Status, Transition
from laneway.services import open_services
from laneway.store import Store, open_store
from laneway.store.pool import Timeouts
from tests.engine.helpers import eventually, make_engine, until_status
from tests.processes import run_process
from tests.test_cli import ROOT, environment, unresolved


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, by name and sorted labels."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(
    scraped: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return scraped.get((name, tuple(sorted(labels.items()))), 0.0)


NO_INSTANCES = {status.value: 0.0 for status in Status}


def _instances(
    scraped: dict[tuple[str, tuple[tuple[str, str], ...]], float], queue: str
) -> dict[str, float]:
    """laneway_instances of one queue, by status, as scraped (a status without a series is
    missing, not 0)."""
    return {
        dict(labels)["status"]: count
        for (name, labels), count in scraped.items()
        if name == "laneway_instances" and dict(labels)["queue"] == queue
    }


async def test_the_counters_move_after_workflows_run(store: Store) -> None:
    metrics = Metrics()
    engine = make_engine(store, hello, flaky, observer=metrics)
    before = samples(metrics.render().decode())
    assert value(before, "laneway_instances_started_total", workflow="hello", queue="hello") == 0
    ok = await engine.enqueue("hello", {"name": "Ada"})
    bad = await engine.enqueue("flaky", {"failTimes": 5})
    async with engine.running():
        await until_status(store, ok.instance_id, Status.COMPLETED)
        await until_status(store, bad.instance_id, Status.FAILED)
    cancelled = await engine.enqueue("hello", {"name": "Bo"})
    await engine.cancel(cancelled.instance_id)
    after = samples(metrics.render().decode())
    hello_labels = {"workflow": "hello", "queue": "hello"}
    flaky_labels = {"workflow": "flaky", "queue": "flaky"}
    assert value(after, "laneway_instances_started_total", **hello_labels) == 1
    assert value(after, "laneway_instances_completed_total", **hello_labels) == 1
    assert value(after, "laneway_instances_cancelled_total", **hello_labels) == 1
    assert value(after, "laneway_instances_started_total", **flaky_labels) == 3
    assert value(after, "laneway_instances_retried_total", **flaky_labels) == 2
    assert value(after, "laneway_instances_failed_total", **flaky_labels) == 1
    assert (
        value(after, "laneway_step_duration_seconds_count", workflow="hello", action="greet") == 1
    )
    assert (
        value(after, "laneway_step_duration_seconds_count", workflow="flaky", action="attempt") == 3
    )
    # Only first attempts count from enqueue to start: one each.
    assert value(after, "laneway_enqueue_to_start_seconds_count", **hello_labels) == 1
    assert value(after, "laneway_enqueue_to_start_seconds_count", **flaky_labels) == 1
    assert value(after, "laneway_claims_total") >= 1
    assert value(after, "laneway_claim_batch_size_sum") == 4  # 1 hello + 3 flaky attempts


async def test_a_cancel_and_a_lost_lease_count_where_the_readme_says(store: Store) -> None:
    # README, Metrics: a cancel counts in the process that served it, not in the one running
    # the instance; a lost worker's instance counts as retried, then failed once
    # dead-lettered, in the process that recovered its lease.
    entered, gate = asyncio.Event(), asyncio.Event()

    async def held(ctx: HandlerContext, params: JSONValue) -> Done:
        entered.set()
        await gate.wait()
        return Done()

    workflow = Workflow("held", handlers={"run": held}, initial="run")
    running, serving = Metrics(), Metrics()
    runner = make_engine(store, workflow, observer=running, poll_interval_seconds=0.05)
    server = make_engine(store, workflow, observer=serving, max_recoveries=1)
    labels = {"workflow": "held", "queue": "held"}
    async with runner.running():
        cancelled = await server.enqueue("held")
        await asyncio.wait_for(entered.wait(), timeout=10)
        await server.cancel(cancelled.instance_id)
        gate.set()  # the handler returns; its write finds the instance cancelled
    ran, served = samples(running.render().decode()), samples(serving.render().decode())
    assert value(ran, "laneway_instances_started_total", **labels) == 1
    assert value(ran, "laneway_instances_cancelled_total", **labels) == 0
    assert value(ran, "laneway_instances_completed_total", **labels) == 0
    assert value(served, "laneway_instances_cancelled_total", **labels) == 1

    lost = await server.enqueue("held")
    for _ in range(2):  # claimed by a worker that then vanishes; `server` recovers its lease
        async with store.connection() as conn:
            await conn.execute("UPDATE laneway.instances SET run_after = now()")
        assert len(await store.claim("vanished", ["held@1"], 10, 30.0)) == 1
        async with store.connection() as conn:
            await conn.execute(
                "UPDATE laneway.instances SET lease_expires_at = now() - interval '1 second'"
                " WHERE status = 'running'"
            )
        await server.claim_loop.maintain()
    dead = await server.get(lost.instance_id)
    assert dead is not None
    assert dead.status == Status.FAILED
    served = samples(serving.render().decode())
    assert value(served, "laneway_instances_retried_total", **labels) == 1
    assert value(served, "laneway_instances_failed_total", **labels) == 1
    assert value(served, "laneway_instances_started_total", **labels) == 0


async def test_cluster_gauges_come_from_a_snapshot_read_at_most_every_few_seconds(
    store: Store,
) -> None:
    metrics = Metrics(refresh_seconds=3600)
    engine = make_engine(store, hello, observer=metrics)
    await engine.enqueue("hello", {"name": "one"})
    await metrics.refresh(store)
    first = samples(metrics.render().decode())
    assert value(first, "laneway_instances", queue="hello", status="pending") == 1
    assert value(first, "laneway_oldest_ready_seconds", queue="hello") >= 0
    await engine.enqueue("hello", {"name": "two"})
    await metrics.refresh(store)  # within refresh_seconds: the cached snapshot
    cached = samples(metrics.render().decode())
    assert value(cached, "laneway_instances", queue="hello", status="pending") == 1
    await metrics.refresh(store, force=True)
    fresh = samples(metrics.render().decode())
    assert value(fresh, "laneway_instances", queue="hello", status="pending") == 2


async def test_every_status_of_every_queue_has_a_series_that_reads_0_when_empty(
    store: Store,
) -> None:
    metrics = Metrics(refresh_seconds=3600)
    engine = make_engine(store, hello, observer=metrics)
    enqueued = await engine.enqueue("hello", {"name": "one"})
    await engine.configure_queue("quiet", concurrency=1)  # a queue no instance was ever in

    def by_status(queue: str) -> dict[str, float]:
        return _instances(samples(metrics.render().decode()), queue)

    await metrics.refresh(store)
    assert by_status("hello") == NO_INSTANCES | {"pending": 1.0}
    assert by_status("quiet") == NO_INSTANCES
    await engine.cancel(enqueued.instance_id)
    await metrics.refresh(store, force=True)
    assert by_status("hello") == NO_INSTANCES | {"cancelled": 1.0}  # pending reads 0, not nothing
    assert by_status("quiet") == NO_INSTANCES


async def test_a_paused_queue_reads_1_until_it_is_resumed(store: Store) -> None:
    metrics = Metrics(refresh_seconds=3600)
    engine = make_engine(store, hello, observer=metrics)
    await engine.enqueue("hello", {"name": "one"})
    await engine.pause_queue("held")

    async def paused() -> dict[str, float]:
        await metrics.refresh(store, force=True)
        scraped = samples(metrics.render().decode())
        return {
            dict(labels)["queue"]: level
            for (name, labels), level in scraped.items()
            if name == "laneway_queue_paused"
        }

    assert await paused() == {"hello": 0.0, "held": 1.0}
    await engine.resume_queue("held")
    assert await paused() == {"hello": 0.0, "held": 0.0}


async def test_a_scrape_waits_for_a_slow_snapshot_read_only_so_long(
    database_url: str, admin: asyncpg.Connection
) -> None:
    # The read waits on a lock the test holds (no lock timeout): it can end only when the test
    # lets it, so the scrape that started it must have stopped waiting on its own.
    async with open_store(database_url, timeouts=Timeouts(lock_ms=0)) as store:
        metrics = Metrics(refresh_seconds=3600, wait_seconds=0.05)
        engine = make_engine(store, hello, observer=metrics)
        await engine.enqueue("hello", {"name": "one"})
        locked = admin.transaction()
        await locked.start()
        await admin.execute("LOCK TABLE laneway.queues IN ACCESS EXCLUSIVE MODE")

        async def read_waits_on_the_lock() -> int:
            waiting: int = await admin.fetchval(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            return waiting

        try:
            async with asyncio.timeout(10):  # a bound for a scrape that would wait, not a measure
                await metrics.refresh(store)
            assert await eventually(read_waits_on_the_lock, lambda n: n > 0) == 1
            async with asyncio.timeout(10):
                await metrics.refresh(store)  # the read under way is joined, not started again
            assert await read_waits_on_the_lock() == 1
            served = samples(metrics.render().decode())
            assert not [key for key in served if key[0] == "laneway_instances"]
        finally:
            await locked.rollback()

        async def scraped() -> float | None:
            await metrics.refresh(store)  # within refresh_seconds of that read: no new one
            return samples(metrics.render().decode()).get(
                ("laneway_instances", (("queue", "hello"), ("status", "pending")))
            )

        assert await eventually(scraped, lambda pending: pending == 1) == 1
        await metrics.aclose()


class _Clock:
    """A monotonic clock the test moves: how old a snapshot is, without waiting for it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _cluster(metrics: Metrics) -> tuple[float, dict[str, float]]:
    """The snapshot's age, and the `hello` queue's laneway_instances by status."""
    scraped = samples(metrics.render().decode())
    return scraped[("laneway_cluster_snapshot_age_seconds", ())], _instances(scraped, "hello")


async def test_a_snapshot_that_fails_to_be_read_again_shows_its_age_then_goes(
    database_url: str, admin: asyncpg.Connection
) -> None:
    clock = _Clock()
    metrics = Metrics(refresh_seconds=5, wait_seconds=30, stale_seconds=15, clock=clock)
    # A read that meets the test's lock fails at once (1 ms lock timeout), within the wait.
    async with open_store(database_url, timeouts=Timeouts(lock_ms=1)) as store:
        engine = make_engine(store, hello, observer=metrics)
        await engine.enqueue("hello", {"name": "one"})
        clock.now += 3
        assert await _cluster(metrics) == (3, {})  # nothing read yet: as old as the process
        await metrics.refresh(store)
        assert await _cluster(metrics) == (0, NO_INSTANCES | {"pending": 1})
        locked = admin.transaction()
        await locked.start()
        try:
            await admin.execute("LOCK TABLE laneway.queues IN ACCESS EXCLUSIVE MODE")
            clock.now += 6
            await metrics.refresh(store)  # due, and fails
            age, counts = await _cluster(metrics)
            assert (age, counts["pending"]) == (6, 1)  # one failed read: kept, and it says so
            clock.now += 10
            await metrics.refresh(store)  # fails again
            assert await _cluster(metrics) == (16, {})  # stale, and no read replaced it: gone
        finally:
            await locked.rollback()
        await metrics.refresh(store)
        age, counts = await _cluster(metrics)
        assert (age, counts["pending"]) == (0, 1)
        await metrics.aclose()


async def test_a_snapshot_whose_read_hangs_is_served_only_so_long(
    database_url: str, admin: asyncpg.Connection
) -> None:
    clock = _Clock()
    metrics = Metrics(refresh_seconds=5, wait_seconds=30, stale_seconds=15, clock=clock)
    # The re-read waits on the test's lock with no lock timeout: it hangs until the test lets it.
    async with open_store(database_url, timeouts=Timeouts(lock_ms=0)) as store:
        engine = make_engine(store, hello, observer=metrics)
        await engine.enqueue("hello", {"name": "one"})
        await metrics.refresh(store)
        assert (await _cluster(metrics))[1]["pending"] == 1
        metrics.wait_seconds = 0.01  # from now on scrapes stop waiting at once
        locked = admin.transaction()
        await locked.start()
        try:
            await admin.execute("LOCK TABLE laneway.queues IN ACCESS EXCLUSIVE MODE")
            clock.now += 6
            await metrics.refresh(store)  # due: the read begins, and waits
            clock.now += 10
            age, counts = await _cluster(metrics)
            assert (age, counts["pending"]) == (16, 1)  # older, but a read is on its way
            clock.now += 10
            assert await _cluster(metrics) == (26, {})  # that read has run 20 s: stale
        finally:
            await locked.rollback()
        # The read ends: its figures are as of its start, 20 s ago, and nothing failed.
        age, counts = await eventually(lambda: _cluster(metrics), lambda found: found[0] == 20)
        assert counts["pending"] == 1
        await metrics.aclose()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_a_worker_serves_its_metrics_on_its_port(database_url: str) -> None:
    port = _free_port()
    settings = Settings(
        database_url=database_url,
        workflow_modules=("app.examples",),
        poll_interval_seconds=0.05,
        metrics_port=port,
    )
    async with open_services(settings, role="worker") as services:
        stopping = asyncio.Event()
        engine = asyncio.create_task(services.engine.run(stopping))
        try:
            done = await services.engine.enqueue("hello", {"name": "W"})
            await until_status(services.store, done.instance_id, Status.COMPLETED)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                scraped = await client.get("/metrics")
                missing = await client.get("/other")
        finally:
            stopping.set()
            await engine
    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain")
    text = scraped.text
    found = samples(text)
    assert value(found, "laneway_instances_completed_total", workflow="hello", queue="hello") == 1
    assert value(found, "laneway_instances", queue="hello", status="completed") == 1
    assert value(found, "laneway_listener_connected") == 1
    assert ("laneway_pool_connections_idle", ()) in found
    assert missing.status_code == 404


async def test_the_metrics_port_takes_a_query_string_and_head_and_refuses_other_methods(
    store: Store,
) -> None:
    port = _free_port()
    metrics = Metrics()
    async with (
        metrics_server(metrics, store, host="127.0.0.1", port=port),
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client,
    ):
        with_params = await client.get("/metrics", params={"module": "laneway"})
        head = await client.head("/metrics?module=laneway")
        posted = await client.post("/metrics", content=b"")
        deleted = await client.delete("/metrics")
        elsewhere = await client.get("/metricsx?x=1")
    await metrics.aclose()
    assert with_params.status_code == 200
    assert "laneway_claims_total" in with_params.text
    assert head.status_code == 200
    assert head.headers["content-type"] == with_params.headers["content-type"]
    assert int(head.headers["content-length"]) > 0
    assert head.content == b""
    for refused in (posted, deleted):
        assert refused.status_code == 405
        assert refused.headers["allow"] == "GET, HEAD"
    assert elsewhere.status_code == 404


async def test_a_request_head_line_over_the_limit_is_431_not_an_error_logged(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    # An outside audit: asyncio logged "Unhandled exception in client_connected_cb" (ERROR, a
    # traceback) for the reader's ValueError, and the client got no answer.
    port = _free_port()
    metrics = Metrics()
    long_header = {"x-filler": "a" * 70_000}
    with caplog.at_level(logging.WARNING):
        async with (
            metrics_server(metrics, store, host="127.0.0.1", port=port),
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client,
        ):
            refused = await client.get("/metrics", headers=long_header)
            scraped = await client.get("/metrics")  # and it goes on serving
    await metrics.aclose()
    assert refused.status_code == 431
    assert scraped.status_code == 200
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_the_metrics_log_names_the_port_bound_when_any_free_port_was_asked_for(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    # It logged "port": 0, the port asked for, which no scraper can reach.
    metrics = Metrics()
    with caplog.at_level(logging.INFO, logger="laneway.metrics"):
        async with metrics_server(metrics, store, host="127.0.0.1", port=0):
            [served] = [r for r in caplog.records if r.getMessage() == "metrics served"]
            port = served.__dict__["port"]
            assert port != 0
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                scraped = await client.get("/metrics")
    await metrics.aclose()
    assert scraped.status_code == 200


@pytest.mark.parametrize(
    ("variables", "host", "allowed"),
    [
        ({}, "localhost:9187", True),
        ({}, "127.0.0.1:9187", True),
        ({}, "rebound.example:9187", False),
        ({}, "localhost:80", False),  # another port: another server's name
        ({"LANEWAY_ALLOWED_HOSTS": "metrics.internal"}, "metrics.internal:9187", True),
        ({"LANEWAY_ALLOWED_HOSTS": "*"}, "rebound.example:9187", True),
        # Bound for a scraper on another machine: any name, unless a list says which.
        ({"LANEWAY_METRICS_HOST": "0.0.0.0"}, "worker-3:9187", True),
        (
            {"LANEWAY_METRICS_HOST": "0.0.0.0", "LANEWAY_ALLOWED_HOSTS": "m.internal"},
            "worker-3:9187",
            False,
        ),
    ],
)
def test_the_metrics_port_answers_for_its_own_names(
    variables: dict[str, str], host: str, allowed: bool
) -> None:
    hosts = AllowedHosts.for_metrics(Settings.from_env(variables))
    assert (hosts is None or hosts.allows_header(host, ("127.0.0.1", 9187))) is allowed


def test_settings_read_the_metrics_port() -> None:
    settings = Settings.from_env(
        {"LANEWAY_METRICS_PORT": "9187", "LANEWAY_METRICS_HOST": "0.0.0.0"}
    )
    assert (settings.metrics_port, settings.metrics_host) == (9187, "0.0.0.0")
    assert dataclasses.replace(Settings.from_env({})).metrics_port is None


async def test_laneway_worker_takes_a_metrics_port(database_url: str) -> None:
    port = _free_port()
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "laneway", "worker", "--metrics-port", str(port),
        cwd=ROOT, env=environment(database_url),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:

            async def scrape() -> httpx.Response | None:
                try:
                    return await client.get("/metrics")
                except httpx.TransportError:
                    return None

            scraped = await eventually(scrape, lambda r: r is not None, timeout=30)
            # A page on a name rebound to 127.0.0.1 sends its own name: refused, as the API
            # refuses it (it was served to any Host).
            rebound = await client.get("/metrics", headers={"Host": f"rebound.example:{port}"})
            named = await client.get("/metrics", headers={"Host": f"localhost:{port}"})
        assert scraped is not None
        assert scraped.status_code == 200
        assert "laneway_claims_total" in scraped.text
        assert rebound.status_code == 400
        assert "laneway_claims_total" not in rebound.text
        assert named.status_code == 200
    finally:
        worker.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            await worker.wait()


@pytest.mark.parametrize("given", ["--metrics-port", "LANEWAY_METRICS_PORT"])
async def test_a_worker_whose_metrics_port_is_taken_stops_at_once_in_one_line(
    database_url: str, given: str
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        flag = given.startswith("--")
        code, _, err = await run_process(
            [sys.executable, "-m", "laneway", "worker", *([given, str(port)] if flag else [])],
            cwd=ROOT,
            env=environment(database_url, **({} if flag else {given: str(port)})),
            timeout=60,
        )
    assert code == 1, err
    lines = err.strip().splitlines()
    # It names what the port was given by: the flag, or the variable.
    assert lines[-1] == (
        f"laneway: cannot serve metrics on 127.0.0.1:{port} ({given}): Address already in use"
    )
    assert "worker started" not in err  # refused before its engine ran
    assert "Traceback" not in err


async def test_a_metrics_host_that_does_not_resolve_is_named_with_the_reason(
    store: Store,
) -> None:
    # It said "Unknown error -2": os.strerror of the name lookup's own (negative) code.
    with pytest.raises(LanewayError) as refused:
        async with metrics_server(Metrics(), store, host="bad.invalid", port=0):
            pass
    assert str(refused.value) == (
        f"cannot serve metrics on bad.invalid:0 (LANEWAY_METRICS_PORT): {unresolved('bad.invalid')}"
    )


def _families(
    text: str, names: set[str]
) -> dict[str, tuple[str, str, list[tuple[str, tuple[tuple[str, str], ...], float | None]]]]:
    """The families named, as (type, help, samples); a `_created` sample's value (a clock
    reading) left out."""
    return {
        family.name: (
            family.type,
            family.documentation,
            [
                (
                    sample.name,
                    tuple(sorted(sample.labels.items())),
                    None if sample.name.endswith("_created") else sample.value,
                )
                for sample in family.samples
            ],
        )
        for family in text_string_to_metric_families(text)
        if family.name in names
    }


@pytest.fixture(params=[True, False], ids=["created", "no_created"])
def created_series(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """The client library's `_created` switch on, then off: the global that
    PROMETHEUS_DISABLE_CREATED_SERIES=True clears at its import (and disable_created_metrics()
    at run time)."""
    on: bool = request.param
    monkeypatch.setattr(prometheus_client.metrics, "_use_created", on)
    return on


def test_the_per_step_series_expose_what_the_client_library_would(
    created_series: bool,
) -> None:
    # Kept in plain numbers for speed, they must read as prometheus_client's own Counter and
    # Histogram would: names, types, help, labels, cumulative buckets, sums and counts, and
    # `_created` samples only while the client's switch is on.
    metrics = Metrics()
    reference = CollectorRegistry()
    steps = Histogram(
        "laneway_step_duration_seconds",
        "How long one handler call took, by workflow and action.",
        ("workflow", "action"),
        buckets=STEP_BUCKETS,
        registry=reference,
    )
    completed = Counter(
        "laneway_instances_completed",
        "Attempts of instances that completed in this process, by workflow and queue.",
        ("workflow", "queue"),
        registry=reference,
    )
    for seconds in (0.0, 0.0004, 0.001, 0.003, 0.01, 7.0, 300.0, 1000.0):  # bounds, and past all
        for action in ("first", "second"):
            metrics.step_finished("w", action, seconds)
            steps.labels("w", action).observe(seconds)
    for queue in ("q1", "q2", "q1"):
        transition = Transition(
            instance_id=uuid.uuid4(), name="w", queue=queue, status=Status.COMPLETED, attempts=1
        )
        metrics.transitioned(transition)
        completed.labels("w", queue).inc()
    names = {"laneway_step_duration_seconds", "laneway_instances_completed"}
    created = {f"{name}_created" for name in names}  # the text format's gauges of their own
    ours = _families(metrics.render().decode(), names | created)
    theirs = _families(generate_latest(reference).decode(), names | created)
    assert set(ours) == (names | created if created_series else names)
    assert ours == theirs
