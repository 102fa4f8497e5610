"""Templates through the GraphQL API: the `report` example, operations, pause/resume, retry."""

import asyncio
from typing import Any
from uuid import UUID

import pytest

from laneway.model import Status
from laneway.services import Services
from tests.api.conftest import Execute, codes
from tests.workflows import BRITTLE_STATE

ENQUEUE = """mutation ($name: String!, $params: JSON) {
  enqueueWorkflow(name: $name, params: $params) { instanceID } }"""

STATUS = """query ($id: ID!) { workflowInstance(instanceID: $id) {
  status stage checkpoint progress message result parentID lastError
  operations { operationID stage type status attempts error startedAt finishedAt }
  events(limit: 50) { type stage checkpoint } } }"""


async def enqueue(run: Execute, name: str, params: Any = None) -> str:
    result = await run(ENQUEUE, name=name, params=params)
    assert result.errors is None, result.errors
    assert result.data is not None
    return str(result.data["enqueueWorkflow"]["instanceID"])


async def status(run: Execute, instance_id: str) -> dict[str, Any]:
    result = await run(STATUS, id=instance_id)
    assert result.errors is None, result.errors
    assert result.data is not None
    instance: dict[str, Any] = result.data["workflowInstance"]
    return instance


async def settled(services: Services, instance_id: str) -> Status:
    return (await services.engine.wait(UUID(instance_id), timeout=15)).status


async def test_report_runs_its_stages_records_operations_and_chains_hello(
    run: Execute, services: Services
) -> None:
    report_id = await enqueue(run, "report", {"topic": "lanes"})
    assert await settled(services, report_id) == Status.COMPLETED
    report = await status(run, report_id)
    assert (report["stage"], report["progress"]) == ("generate", 1.0)
    operations = report["operations"]
    assert [
        (o["stage"], o["type"], o["status"]) for o in operations if o["stage"] != "analyze"
    ] == [
        ("gather", "collect", "completed"),
        ("generate", "render", "completed"),
    ]
    assert sorted(o["type"] for o in operations if o["stage"] == "analyze") == [
        "count_words",
        "find_topics",
        "score_sentiment",
    ]
    assert all(o["startedAt"] <= o["finishedAt"] for o in operations)
    assert report["result"]["context"]["summary"] == "lanes: 9 words on ['lanes']"
    child_id = report["result"]["next_instance_id"]
    assert await settled(services, child_id) == Status.COMPLETED
    child = await status(run, child_id)
    assert child["parentID"] == report_id
    assert child["result"] == {"greeting": "Hello, report!"}


async def test_report_pauses_at_data_ready_until_resumed_once(
    run: Execute, services: Services
) -> None:
    report_id = await enqueue(run, "report", {"topic": "review me", "review": True})
    assert await settled(services, report_id) == Status.PAUSED
    paused = await status(run, report_id)
    assert (paused["status"], paused["checkpoint"], paused["stage"]) == (
        "paused",
        "data_ready",
        "gather",
    )
    assert paused["events"][-1] == {"type": "paused", "stage": "gather", "checkpoint": "data_ready"}
    resume = "mutation ($id: ID!) { resumeWorkflow(instanceID: $id) { status checkpoint } }"
    outcomes = await asyncio.gather(*(run(resume, id=report_id) for _ in range(3)))
    winners = [o for o in outcomes if o.errors is None]
    assert len(winners) == 1
    assert winners[0].data == {"resumeWorkflow": {"status": "pending", "checkpoint": None}}
    assert sorted(codes(o)[0] or "" for o in outcomes if o.errors) == ["CONFLICT", "CONFLICT"]
    assert await settled(services, report_id) == Status.COMPLETED
    events = [e["type"] for e in (await status(run, report_id))["events"]]
    assert events.count("resumed") == 1


async def test_retry_of_a_failed_template_reruns_only_the_failed_stage(
    run: Execute, services: Services
) -> None:
    BRITTLE_STATE.update({"fail": True, "prepared": 0})
    brittle_id = await enqueue(run, "brittle", {})
    assert await settled(services, brittle_id) == Status.FAILED
    failed = await status(run, brittle_id)
    assert failed["lastError"] is not None
    assert "risky operation refused" in failed["lastError"]
    assert [(o["type"], o["status"]) for o in failed["operations"]] == [
        ("prepare", "completed"),
        ("risky", "failed"),
    ]
    BRITTLE_STATE["fail"] = False
    retried = await run(
        "mutation ($id: ID!) { retryWorkflow(instanceID: $id) { status } }", id=brittle_id
    )
    assert retried.data == {"retryWorkflow": {"status": "pending"}}
    assert await settled(services, brittle_id) == Status.COMPLETED
    done = await status(run, brittle_id)
    assert [(o["type"], o["status"]) for o in done["operations"]] == [
        ("prepare", "completed"),
        ("risky", "completed"),
    ]
    assert BRITTLE_STATE["prepared"] == 1  # the completed stage was not run again


async def test_workflows_describe_templates_with_their_stages(run: Execute) -> None:
    result = await run("{ workflows { name kind queue stages } }")
    assert result.data is not None
    by_name = {w["name"]: w for w in result.data["workflows"]}
    assert by_name["report"] == {
        "name": "report",
        "kind": "template",
        "queue": "report",
        "stages": ["gather", "analyze", "generate"],
    }
    assert by_name["hello"]["kind"] == "handlers"
    assert by_name["hello"]["stages"] == []


async def test_instances_page_by_statuses_and_offset(run: Execute, services: Services) -> None:
    ids = [await enqueue(run, "hello", {"name": f"n{i}"}) for i in range(5)]
    for instance_id in ids:
        await settled(services, instance_id)
    paused_id = await enqueue(run, "report", {"review": True})
    await settled(services, paused_id)
    page = """query ($offset: Int) { workflowInstances(statuses: ["completed", "paused"],
        limit: 2, offset: $offset) { instanceID status } }"""
    seen: list[str] = []
    for offset in (0, 2, 4, 6):
        result = await run(page, offset=offset)
        assert result.data is not None
        rows = result.data["workflowInstances"]
        assert len(rows) <= 2
        seen += [r["instanceID"] for r in rows]
    assert len(seen) == len(set(seen))
    assert set(ids) | {paused_id} <= set(seen)
    bad = await run("{ workflowInstances(limit: 501) { instanceID } }")
    assert codes(bad) == ["BAD_USER_INPUT"]


@pytest.mark.parametrize("params", [{"review": "yes"}, {"topic": ""}, [1, 2]])
async def test_report_rejects_bad_params(run: Execute, params: Any) -> None:
    result = await run(ENQUEUE, name="report", params=params)
    assert codes(result) == ["BAD_USER_INPUT"]


async def test_entity_lock_shows_its_holder_until_released(
    run: Execute, services: Services
) -> None:
    owner = await enqueue(run, "hello", {"name": "holder"})
    query = """query ($t: String!, $e: String!) { entityLock(entityType: $t, entityID: $e) {
        entityType entityID ownerInstanceID fencingToken expiresAt } }"""
    free = await run(query, t="account", e="42")
    assert free.data == {"entityLock": None}
    lock = await services.engine.locks.acquire("account", "42", UUID(owner), ttl_seconds=60)
    assert lock is not None
    held = await run(query, t="account", e="42")
    assert held.data is not None
    shown = held.data["entityLock"]
    assert (shown["entityType"], shown["entityID"], shown["ownerInstanceID"]) == (
        "account",
        "42",
        owner,
    )
    assert shown["fencingToken"] == str(lock.fencing_token)
    await services.engine.locks.release(lock)
    assert (await run(query, t="account", e="42")).data == {"entityLock": None}


async def test_a_resume_input_the_context_has_no_room_for_is_bad_user_input(
    run: Execute, services: Services
) -> None:
    report_id = await enqueue(run, "report", {"topic": "big", "review": True})
    assert await settled(services, report_id) == Status.PAUSED
    resume = """mutation ($id: ID!, $input: JSON) {
      resumeWorkflow(instanceID: $id, input: $input) { status } }"""
    # Within the params limit (256 KiB), but past what the context has room for under the
    # label (its cap is the result's, less what the context holds).
    refused = await run(resume, id=report_id, input={"note": "n" * 262_000})
    assert codes(refused) == ["BAD_USER_INPUT"]
    assert refused.errors is not None
    assert "checkpoint 'data_ready' takes at most" in refused.errors[0].message
    assert (await status(run, report_id))["status"] == "paused"  # nothing lost: resume again
    accepted = await run(resume, id=report_id, input={"note": "fits"})
    assert accepted.data == {"resumeWorkflow": {"status": "pending"}}, accepted.errors
    assert await settled(services, report_id) == Status.COMPLETED
