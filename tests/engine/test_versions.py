"""Workflow versions side by side (issue #21): what an enqueue starts, what a worker claims,
and why an instance of a version no live worker runs waits."""

import pytest

from laneway import Done, EnqueueRequest, HandlerContext, Template, Workflow
from laneway.engine import WorkflowRegistry
from laneway.engine.registry import version_order
from laneway.errors import InvalidInputError
from laneway.model import JSONValue, Status
from laneway.store import Store
from tests.engine.helpers import eventually, make_engine, until_status


def versioned(version: str, name: str = "shipper") -> Workflow:
    async def only(ctx: HandlerContext, params: JSONValue) -> Done:
        return Done({"ran_on": version})

    return Workflow(name=name, version=version, handlers={"only": only}, initial="only")


def test_versions_sort_newest_first_as_people_number_them() -> None:
    ordered = ["1", "1.1", "1.9", "1.10", "2", "10", "2026-01-05", "2026-02-01", "v2", "v10"]
    assert sorted(reversed(ordered), key=version_order) == ordered
    registry = WorkflowRegistry([versioned("9"), versioned("10"), versioned("1.5")])
    assert registry.versions("shipper") == ["10", "9", "1.5"]
    assert registry.get("shipper").version == "10"
    assert registry.runs() == ["shipper@1.5", "shipper@10", "shipper@9"]
    assert len(registry) == 1  # one workflow, three versions
    assert [w.version for w in registry] == ["10", "9", "1.5"]


def test_a_peer_outdates_the_workflows_it_runs_newer_than_the_newest_here() -> None:
    # What a due schedule's fire is left to a live peer for (due_work.py): per workflow, a
    # version newer than this process's newest, as versions compare.
    registry = WorkflowRegistry(
        [versioned("1"), versioned("1.9"), versioned("10", name="other"), versioned("1", "own")]
    )
    peers = [("shipper", "1.10"), ("other", "9"), ("other", "10"), ("own", "1"), ("gone", "5")]
    assert registry.outdated_by(peers) == {"shipper"}
    assert registry.outdated_by([("shipper", "1.9"), ("shipper", "1")]) == set()
    assert registry.outdated_by([("other", "11")]) == {"other"}
    assert registry.outdated_by([]) == set()


def test_a_version_is_registered_once_and_is_a_name() -> None:
    registry = WorkflowRegistry([versioned("1")])
    registry.register(registry.get("shipper", "1"))  # the same object again: a no-op
    with pytest.raises(InvalidInputError, match="version '1'"):
        registry.register(versioned("1"))
    with pytest.raises(InvalidInputError, match="workflow version"):
        versioned("1@2")
    with pytest.raises(InvalidInputError, match="workflow version"):
        versioned("")
    assert Workflow.__dataclass_fields__["version"].default == "1"


def test_a_template_version_is_its_workflows() -> None:
    from laneway.engine.template import Operation, Stage
    from laneway.engine.template_interpreter import compile_template

    stage = Stage(name="only", operations=[Operation(type="op")])
    assert compile_template(Template(type="t", stages=[stage]), {}).version == "1"
    assert compile_template(Template(type="t", stages=[stage], version=3), {}).version == "3"
    assert compile_template(Template(type="t", stages=[stage], version="2.1"), {}).version == "2.1"
    with pytest.raises(InvalidInputError, match="version"):
        Template(type="t", stages=[stage], version=0)


async def test_an_enqueue_starts_the_newest_version_or_the_one_it_names(store: Store) -> None:
    engine = make_engine(store, versioned("1"), versioned("2"))
    newest = await engine.enqueue("shipper")
    named = await engine.enqueue("shipper", version="1")
    (batched,) = await engine.enqueue_many([EnqueueRequest(name="shipper", version="1")])
    assert (newest.instance.version, named.instance.version) == ("2", "1")
    assert batched.instance.version == "1"
    stored = await store.get_instance(named.instance_id)
    assert stored is not None
    assert stored.version == "1"
    with pytest.raises(InvalidInputError, match=r"no version '3' here \(registered: 2, 1\)"):
        await engine.enqueue("shipper", version="3")


async def test_a_worker_claims_only_the_versions_it_registered(store: Store) -> None:
    enqueuer = make_engine(store, versioned("1"), versioned("2"))
    old = [(await enqueuer.enqueue("shipper", version="1")).instance_id for _ in range(3)]
    new = [(await enqueuer.enqueue("shipper")).instance_id for _ in range(3)]
    v1 = make_engine(store, versioned("1"), poll_interval_seconds=0.02)
    v2 = make_engine(store, versioned("2"), poll_interval_seconds=0.02)
    async with v2.running():
        for instance_id in new:
            done = await until_status(store, instance_id, Status.COMPLETED)
            assert done.result == {"ran_on": "2"}
        for instance_id in old:  # v2 code never ran an old instance
            record = await store.get_instance(instance_id)
            assert record is not None
            assert record.status == Status.PENDING
        reason = await eventually(
            lambda: v2.waiting_reason(old[0]),
            lambda r: r is not None and r.code == "VERSION_UNAVAILABLE",
        )
        assert reason is not None
        assert reason.message == (
            "no live worker runs version '1' of workflow 'shipper' (live workers run '2')"
        )
        async with v1.running():
            for instance_id in old:
                done = await until_status(store, instance_id, Status.COMPLETED)
                assert done.result == {"ran_on": "1"}


async def test_the_workers_registry_lists_each_processes_versions(store: Store) -> None:
    engine = make_engine(store, versioned("1"), versioned("2"), versioned("1", name="other"))
    await engine.claim_loop.presence.beat()
    (worker,) = await engine.workers()
    assert worker.versions == (("other", "1"), ("shipper", "1"), ("shipper", "2"))
    assert worker.workflows == ("other", "shipper")


async def test_no_worker_at_all_is_still_no_worker(store: Store) -> None:
    engine = make_engine(store, versioned("1"))
    result = await engine.enqueue("shipper")
    reason = await engine.waiting_reason(result.instance_id)
    assert reason is not None
    assert reason.code == "NO_WORKER"
