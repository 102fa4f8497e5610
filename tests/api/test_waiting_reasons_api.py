"""Concurrency keys, the caps per key and waiting reasons over GraphQL on a real uvicorn server
(issue #18, points 1-2): `enqueueWorkflow(concurrencyKey:)`, `configureQueue(keyConcurrency:,
keyRatePerMinute:)`, and `waitingReason` on one instance and on a page of them.

The server is an API-only process (its engine off, so it never registers as a worker) that
knows the workflows `gated` and `unserved`; the `worker` fixture is a worker process beside it
that runs `gated` only. So `unserved` is a workflow the server accepts that no live worker
lists (NO_WORKER), while `gated` instances run and hold their slot until the test opens their
gate.
"""

import asyncio
import contextlib
import dataclasses
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import pytest

from laneway.api.app import create_app
from laneway.engine.context import Done, HandlerContext
from laneway.engine.handler_map import Workflow
from laneway.engine.requests import EnqueueRequest
from laneway.model import JSONValue, WaitingReason
from laneway.services import Services, open_services
from tests.api.conftest import LiveServer, live_server, make_settings, wait_until

ENQUEUE = """mutation ($name: String!, $queue: String, $key: String, $delay: Float,
                       $params: JSON) {
  enqueueWorkflow(name: $name, queue: $queue, concurrencyKey: $key, delayMs: $delay,
                  params: $params) { instanceID } }"""
INSTANCE = """query ($id: ID!) { workflowInstance(instanceID: $id) {
  instanceID status createdAt runAfter concurrencyKey waitingReason { code message until } } }"""
PAGE = """query ($name: String) { workflowInstances(name: $name, limit: 50) {
  instanceID status waitingReason { code message until } } }"""
CONFIGURE = """mutation ($name: String!, $n: Int!, $keyN: Int, $keyRate: Float) {
  configureQueue(name: $name, concurrency: $n, keyConcurrency: $keyN,
                 keyRatePerMinute: $keyRate) {
    name concurrency ratePerMinute keyConcurrency keyRatePerMinute } }"""
QUEUES = "{ queues { name concurrency ratePerMinute keyConcurrency keyRatePerMinute } }"
WORKERS = "{ workers { ownerID } }"


class Gates:
    """Named gates a `gated` instance waits on (its params name one); closed until opened."""

    def __init__(self) -> None:
        self._events: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)

    def open(self, name: str) -> None:
        self._events[name].set()

    def open_all(self) -> None:
        for event in self._events.values():
            event.set()

    async def wait(self, name: str) -> None:
        await self._events[name].wait()


def gated(gates: Gates) -> Workflow:
    """A workflow that runs until the gate its params name is opened."""

    async def run(ctx: HandlerContext, params: JSONValue) -> Done:
        assert isinstance(params, dict)
        await gates.wait(str(params["gate"]))
        return Done({"gate": params["gate"]})

    return Workflow("gated", handlers={"run": run}, initial="run")


async def _never(ctx: HandlerContext, params: JSONValue) -> Done:
    raise AssertionError("no worker runs `unserved`")


unserved = Workflow("unserved", handlers={"run": _never}, initial="run")


@dataclasses.dataclass
class Api:
    """The API-only server and its services (to watch what its store is asked)."""

    server: LiveServer
    services: Services
    database_url: str
    gates: Gates

    async def graphql(self, query: str, **variables: Any) -> dict[str, Any]:
        return await self.server.graphql(query, **variables)

    async def ok(self, query: str, **variables: Any) -> dict[str, Any]:
        body = await self.graphql(query, **variables)
        assert "errors" not in body, body
        data: dict[str, Any] = body["data"]
        return data

    async def enqueue(self, name: str, **variables: Any) -> str:
        data = await self.ok(ENQUEUE, name=name, **variables)
        instance_id: str = data["enqueueWorkflow"]["instanceID"]
        return instance_id

    async def instance(self, instance_id: str) -> dict[str, Any]:
        found: dict[str, Any] = (await self.ok(INSTANCE, id=instance_id))["workflowInstance"]
        return found

    async def reach(self, instance_id: str, status: str) -> dict[str, Any]:
        async def reached() -> bool:
            return bool((await self.instance(instance_id))["status"] == status)

        await wait_until(reached)
        return await self.instance(instance_id)


@pytest.fixture
async def api(database_url: str) -> AsyncIterator[Api]:
    gates = Gates()
    settings = make_settings(database_url, owner_id="api-1", engine_enabled=False)
    app = create_app(settings, workflows=[gated(gates), unserved])
    try:
        async with live_server(settings, app=app) as server:
            assert app.services is not None
            yield Api(server, app.services, database_url, gates)
    finally:
        gates.open_all()


@asynccontextmanager
async def worker_running(api: Api) -> AsyncIterator[None]:
    """A worker process beside the server that runs `gated` (not `unserved`), registered."""
    settings = make_settings(api.database_url, owner_id="worker-1", workflow_modules=())
    async with open_services(settings, workflows=[gated(api.gates)], role="worker") as services:
        stopping = asyncio.Event()
        task = asyncio.create_task(services.engine.run(stopping))
        try:

            async def registered() -> bool:
                workers = (await api.ok(WORKERS))["workers"]
                return [w["ownerID"] for w in workers] == ["worker-1"]

            await wait_until(registered)
            yield
        finally:
            api.gates.open_all()  # a running `gated` would hold the shutdown for its grace
            stopping.set()
            await task


@pytest.fixture
async def worker(api: Api) -> AsyncIterator[None]:
    async with worker_running(api):
        yield


def _codes(body: dict[str, Any]) -> list[str | None]:
    return [(e.get("extensions") or {}).get("code") for e in body.get("errors") or []]


# -- concurrency keys and the caps per key ----------------------------------------------------


async def test_an_instance_shows_its_concurrency_key_and_a_too_long_key_is_refused(
    api: Api,
) -> None:
    keyed = await api.enqueue("unserved", key="tenant-a")
    unkeyed = await api.enqueue("unserved")
    longest = await api.enqueue("unserved", key="k" * 255)  # the longest a key may be
    assert (await api.instance(keyed))["concurrencyKey"] == "tenant-a"
    assert (await api.instance(unkeyed))["concurrencyKey"] is None
    assert (await api.instance(longest))["concurrencyKey"] == "k" * 255

    refused = await api.graphql(ENQUEUE, name="unserved", key="k" * 256)
    assert _codes(refused) == ["BAD_USER_INPUT"]
    assert "data" not in refused  # the argument guard's: refused before anything ran
    page = (await api.ok(PAGE, name="unserved"))["workflowInstances"]
    assert sorted(i["instanceID"] for i in page) == sorted([keyed, unkeyed, longest])


async def test_configure_queue_sets_refuses_and_clears_the_caps_per_key(api: Api) -> None:
    data = await api.ok(CONFIGURE, name="tenants", n=5, keyN=2, keyRate=30.0)
    expected = {
        "name": "tenants",
        "concurrency": 5,
        "ratePerMinute": None,
        "keyConcurrency": 2,
        "keyRatePerMinute": 30.0,
    }
    assert data["configureQueue"] == expected

    async def listed() -> dict[str, Any]:
        queues = (await api.ok(QUEUES))["queues"]
        (queue,) = [q for q in queues if q["name"] == "tenants"]
        found: dict[str, Any] = queue
        return found

    assert await listed() == expected

    for bad in ({"keyN": 0}, {"keyN": -1}, {"keyRate": -1.0}, {"keyRate": 0.0}):
        refused = await api.graphql(CONFIGURE, name="tenants", n=9, **bad)
        assert _codes(refused) == ["BAD_USER_INPUT"], bad
        assert "data" not in refused  # the argument guard's: refused before anything ran
    assert await listed() == expected  # a refused change changed nothing

    # Left out, each cap per key is cleared (no cap), as ratePerMinute is.
    cleared = (await api.ok(CONFIGURE, name="tenants", n=4))["configureQueue"]
    assert cleared == {
        **expected,
        "concurrency": 4,
        "keyConcurrency": None,
        "keyRatePerMinute": None,
    }
    assert await listed() == cleared


# -- waiting reasons ----------------------------------------------------------------------------


@pytest.mark.usefixtures("worker")
async def test_a_delayed_instance_waits_until_its_run_after(api: Api) -> None:
    instance_id = await api.enqueue("gated", delay=60000.0, params={"gate": "late"})
    found = await api.instance(instance_id)
    assert found["status"] == "pending"
    reason = found["waitingReason"]
    assert reason["code"] == "DELAYED"
    assert reason["until"] == found["runAfter"]
    assert abs(found["runAfter"] - found["createdAt"] - 60000.0) < 1000.0
    assert reason["message"].startswith("delayed until ")
    said = datetime.fromisoformat(reason["message"].removeprefix("delayed until "))
    assert said.utcoffset() == timedelta(0)  # said in UTC
    assert abs(said.timestamp() * 1000.0 - reason["until"]) < 1.0  # the message says when


@pytest.mark.usefixtures("worker")
async def test_a_running_or_completed_instance_has_no_waiting_reason(api: Api) -> None:
    instance_id = await api.enqueue("gated", params={"gate": "g"})
    running = await api.reach(instance_id, "running")
    assert running["waitingReason"] is None

    api.gates.open("g")
    completed = await api.reach(instance_id, "completed")
    assert completed["waitingReason"] is None


async def test_a_workflow_no_live_worker_registered_waits_for_one(api: Api) -> None:
    # The server knows `gated` but runs no engine, and no worker is up yet.
    instance_id = await api.enqueue("gated", params={"gate": "g"})
    reason = (await api.instance(instance_id))["waitingReason"]
    assert reason == {
        "code": "NO_WORKER",
        "message": "no live worker has workflow 'gated' registered",
        "until": None,
    }

    async with worker_running(api):
        await api.reach(instance_id, "running")  # the reason was the only thing in its way
        # A workflow the live worker does not run still waits for one.
        other = await api.enqueue("unserved")
        assert (await api.instance(other))["waitingReason"] == {
            "code": "NO_WORKER",
            "message": "no live worker has workflow 'unserved' registered",
            "until": None,
        }


@pytest.mark.usefixtures("worker")
async def test_an_instance_whose_key_is_full_says_how_many_run(api: Api) -> None:
    await api.ok(CONFIGURE, name="tenants", n=5, keyN=1)
    first = await api.enqueue("gated", queue="tenants", key="tenant-a", params={"gate": "a1"})
    await api.reach(first, "running")

    second = await api.enqueue("gated", queue="tenants", key="tenant-a", params={"gate": "a2"})
    found = await api.instance(second)
    assert found["status"] == "pending"
    assert found["waitingReason"] == {
        "code": "KEY_FULL",
        "message": "key 'tenant-a' of queue 'tenants' is full: 1 of 1 running",
        "until": None,
    }

    # The cap is per key: another tenant's instance runs beside the first.
    other = await api.enqueue("gated", queue="tenants", key="tenant-b", params={"gate": "b1"})
    await api.reach(other, "running")
    assert (await api.instance(second))["status"] == "pending"

    api.gates.open("a1")
    await api.reach(second, "running")  # its key had room again


@pytest.mark.usefixtures("worker")
async def test_an_instance_whose_queue_is_full_says_how_many_run(api: Api) -> None:
    await api.ok(CONFIGURE, name="single", n=1)
    first = await api.enqueue("gated", queue="single", params={"gate": "s1"})
    await api.reach(first, "running")

    second = await api.enqueue("gated", queue="single", params={"gate": "s2"})
    found = await api.instance(second)
    assert found["status"] == "pending"
    assert found["waitingReason"] == {
        "code": "QUEUE_FULL",
        "message": "queue 'single' is full: 1 of 1 running",
        "until": None,
    }

    api.gates.open("s1")
    await api.reach(second, "running")


@pytest.mark.usefixtures("worker")
async def test_a_page_of_instances_reads_its_waiting_reasons_in_one_query(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = await api.enqueue("gated", params={"gate": "done"})
    api.gates.open("done")
    await api.reach(done, "completed")
    results = await api.services.engine.enqueue_many(
        [EnqueueRequest(name="unserved") for _ in range(49)]
    )
    pending = {str(result.instance_id) for result in results}

    store = api.services.store
    original = store.waiting_reasons
    asked: list[list[UUID]] = []

    async def counted(instance_ids: Sequence[UUID]) -> dict[UUID, WaitingReason]:
        asked.append(list(instance_ids))
        return await original(instance_ids)

    monkeypatch.setattr(store, "waiting_reasons", counted)

    page = (await api.ok(PAGE, name=None))["workflowInstances"]

    assert len(page) == 50
    by_id = {row["instanceID"]: row for row in page}
    assert set(by_id) == pending | {done}
    assert by_id[done]["waitingReason"] is None
    for instance_id in pending:
        assert by_id[instance_id]["status"] == "pending"
        assert by_id[instance_id]["waitingReason"]["code"] == "NO_WORKER"
    # One query for the page, asked only about the instances that wait.
    assert len(asked) == 1
    assert sorted(str(i) for i in asked[0]) == sorted(pending)


# -- one moment: the status and the reason of an instance come from one snapshot ---------------

ONE_INSTANCE = """query ($id: ID!) { workflowInstance(instanceID: $id) {
  instanceID status waitingReason { code } } }"""
LIST = """{ workflowInstances(statuses: ["pending", "paused", "waiting"], limit: 500) {
  instanceID status waitingReason { code } } }"""
CONNECTION = """{ workflowInstancesConnection(statuses: ["pending", "paused", "waiting"]) {
  edges { node { instanceID status waitingReason { code } } } } }"""


def _shown(field: str, data: dict[str, Any]) -> list[dict[str, Any]]:
    """The instances a response shows, whichever of the three fields it asked."""
    if field == "workflowInstance":
        return [data[field]]
    if field == "workflowInstancesConnection":
        return [edge["node"] for edge in data[field]["edges"]]
    rows: list[dict[str, Any]] = data[field]
    return rows


@pytest.mark.parametrize(
    ("field", "query"),
    [
        ("workflowInstance", ONE_INSTANCE),
        ("workflowInstances", LIST),
        ("workflowInstancesConnection", CONNECTION),
    ],
)
async def test_status_and_waiting_reason_agree_when_the_instance_changes_between_reads(
    api: Api, monkeypatch: pytest.MonkeyPatch, field: str, query: str
) -> None:
    # An outside audit saw `pending` with a null reason (and `waiting` with QUEUE_FULL) under
    # load: the reason was read by a second statement, after the row had moved on. Here the
    # instance is cancelled, by another client, right before its reason is read.
    instance_id = await api.enqueue("unserved")
    store = api.services.store
    original = store.waiting_reasons
    cancelled: list[UUID] = []

    async def cancelled_first(instance_ids: Sequence[UUID]) -> dict[UUID, WaitingReason]:
        if not cancelled:
            # Another task: a request of another client, on a connection of its own.
            await asyncio.create_task(api.services.engine.cancel(UUID(instance_id)))
            cancelled.append(UUID(instance_id))
        return await original(instance_ids)

    monkeypatch.setattr(store, "waiting_reasons", cancelled_first)

    shown = _shown(field, await api.ok(query, id=instance_id))

    assert cancelled == [UUID(instance_id)]  # the change happened between the two reads
    # The instance as it was when the row was read: pending, and why.
    assert shown == [
        {"instanceID": instance_id, "status": "pending", "waitingReason": {"code": "NO_WORKER"}}
    ]
    # The next response shows the change, whole.
    assert _shown(field, await api.ok(query, id=instance_id)) in (
        [{"instanceID": instance_id, "status": "cancelled", "waitingReason": None}],
        [],  # the lists ask for instances that wait only
    )


async def test_a_page_that_does_not_ask_for_waiting_reasons_opens_no_snapshot(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    instance_id = await api.enqueue("unserved")
    store = api.services.store
    opened: list[None] = []
    original = store.snapshot

    def counted() -> contextlib.AbstractAsyncContextManager[None]:
        opened.append(None)
        return original()

    monkeypatch.setattr(store, "snapshot", counted)

    assert (await api.ok(PAGE.replace(" waitingReason { code message until }", ""), name=None))[
        "workflowInstances"
    ] == [{"instanceID": instance_id, "status": "pending"}]
    assert opened == []
    page = (await api.ok(PAGE, name=None))["workflowInstances"]
    assert page[0]["waitingReason"]["code"] == "NO_WORKER"
    assert opened == [None]


async def test_a_mutations_instance_shows_no_reason_of_a_status_it_does_not_show(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An outside audit: signalWorkflow answered `status: pending` beside AWAITING_SIGNAL, the
    # reason of the wait the instance reached after the mutation had read its row (a mutation's
    # instance is read by the write; its reason afterwards, not in one snapshot). Here another
    # process moves it on to a wait right before the reason is read.
    query = """mutation { enqueueWorkflow(name: "unserved", idempotencyKey: "once") {
      created instance { instanceID status waitingReason { code } } } }"""
    first = (await api.ok(query))["enqueueWorkflow"]
    assert first["instance"]["waitingReason"] == {"code": "NO_WORKER"}
    instance_id = first["instance"]["instanceID"]
    store = api.services.store
    original = store.waiting_reasons
    moved: list[UUID] = []

    async def moved_on_first(
        instance_ids: Sequence[UUID], *statuses: Sequence[str] | None
    ) -> dict[UUID, WaitingReason]:
        if not moved:
            async with store.connection() as conn:  # as a worker's write leaves it
                await conn.execute(
                    "UPDATE laneway.instances SET status = 'waiting', wait_signal = 'go',"
                    " wake_at = now() + interval '1 minute' WHERE instance_id = $1",
                    UUID(instance_id),
                )
            moved.append(UUID(instance_id))
        return await original(instance_ids, *statuses)

    monkeypatch.setattr(store, "waiting_reasons", moved_on_first)

    again = (await api.ok(query))["enqueueWorkflow"]

    assert moved == [UUID(instance_id)]  # the change happened between the two reads
    assert again["created"] is False
    # The row as the mutation read it, and no reason of a status it does not show.
    assert again["instance"] == {
        "instanceID": instance_id,
        "status": "pending",
        "waitingReason": None,
    }
    # The next read shows the change, whole.
    assert (await api.instance(instance_id))["waitingReason"]["code"] == "AWAITING_SIGNAL"
