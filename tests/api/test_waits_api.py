"""Durable waits over GraphQL on a real uvicorn server (issue #19): the examples `nap`,
`approval` and `review`, signalWorkflow with its codes and idempotency, resumeWorkflow(input)
with its schema, and the `waiting` and `signalled` events (with `signal`) on a websocket."""

import asyncio
from typing import Any
from uuid import UUID

import asyncpg
from gql import Client, GraphQLRequest

from tests.api.conftest import LiveServer, wait_until
from tests.api.test_websocket import transport

ENQUEUE = """mutation ($name: String!, $params: JSON) {
  enqueueWorkflow(name: $name, params: $params) { instanceID } }"""
INSTANCE = """query ($id: ID!) { workflowInstance(instanceID: $id) {
  status result checkpoint checkpointInputSchema waitingReason { code message until } } }"""
SIGNAL = """mutation ($id: ID!, $name: String!, $payload: JSON, $key: String) {
  signalWorkflow(instanceID: $id, name: $name, payload: $payload, idempotencyKey: $key) {
    signalID accepted instance { instanceID status } } }"""
RESUME = """mutation ($id: ID!, $input: JSON) {
  resumeWorkflow(instanceID: $id, input: $input) { status checkpoint } }"""
RESUME_ALL = """mutation ($name: String!) {
  resumeWorkflows(filter: {name: $name}) { matched changed } }"""
EVENTS = """subscription ($id: ID!) {
  workflowEvents(instanceID: $id, afterEventID: "0") { type status signal } }"""
COUNTS = "{ queues { name counts { pending running paused waiting completed } } }"

REVIEW_SCHEMA = {
    "type": "object",
    "required": ["decision"],
    "properties": {
        "decision": {"enum": ["approve", "reject"]},
        "comment": {"type": "string"},
    },
    "additionalProperties": False,
}


async def enqueue(server: LiveServer, name: str, params: Any = None) -> str:
    body = await server.graphql(ENQUEUE, name=name, params=params)
    instance_id: str = body["data"]["enqueueWorkflow"]["instanceID"]
    return instance_id


async def instance(server: LiveServer, instance_id: str) -> dict[str, Any]:
    found: dict[str, Any] = (await server.graphql(INSTANCE, id=instance_id))["data"][
        "workflowInstance"
    ]
    return found


async def until_status(server: LiveServer, instance_id: str, status: str) -> dict[str, Any]:
    """The instance as the read that found it in `status` gave it (a second read could find
    it moved on: a nap's sleep ends while the test looks)."""
    seen: dict[str, Any] = {}

    async def reached() -> bool:
        seen.update(await instance(server, instance_id))
        return bool(seen["status"] == status)

    await wait_until(reached)
    return seen


def codes_of(body: dict[str, Any]) -> list[str]:
    return [error["extensions"]["code"] for error in body.get("errors") or []]


async def test_nap_sleeps_durably_then_completes(server: LiveServer) -> None:
    instance_id = await enqueue(server, "nap", {"seconds": 1.0})  # asleep while it is read
    asleep = await until_status(server, instance_id, "waiting")
    assert asleep["waitingReason"]["code"] == "SLEEPING"
    assert asleep["waitingReason"]["until"] is not None
    counts = {q["name"]: q["counts"] for q in (await server.graphql(COUNTS))["data"]["queues"]}
    assert counts["nap"]["waiting"] == 1
    done = await until_status(server, instance_id, "completed")
    assert done["result"] == {"slept": 1.0}
    assert done["waitingReason"] is None


async def test_approval_takes_the_signal_and_its_payload(server: LiveServer) -> None:
    instance_id = await enqueue(server, "approval", {"timeoutSeconds": 60})
    waiting = await until_status(server, instance_id, "waiting")
    assert waiting["waitingReason"]["code"] == "AWAITING_SIGNAL"
    assert "'approve'" in waiting["waitingReason"]["message"]
    events: list[dict[str, Any]] = []

    async def watch() -> None:
        async with Client(transport=transport(server)) as session:
            async for result in session.subscribe(
                GraphQLRequest(EVENTS, variable_values={"id": instance_id})
            ):
                events.append(result["workflowEvents"])
                if result["workflowEvents"]["type"] == "completed":
                    return

    watcher = asyncio.create_task(watch())
    sent = await server.graphql(
        SIGNAL, id=instance_id, name="approve", payload={"by": "ann"}, key="k1"
    )
    result = sent["data"]["signalWorkflow"]
    assert result["accepted"] is True
    assert result["instance"]["status"] == "pending"
    again = await server.graphql(
        SIGNAL, id=instance_id, name="approve", payload={"by": "ann"}, key="k1"
    )
    assert again["data"]["signalWorkflow"]["accepted"] is False
    assert again["data"]["signalWorkflow"]["signalID"] == result["signalID"]
    done = await until_status(server, instance_id, "completed")
    assert done["result"] == {"approved": True, "payload": {"by": "ann"}}
    async with asyncio.timeout(15):
        await watcher
    typed = [(e["type"], e["status"], e["signal"]) for e in events]
    assert ("waiting", "waiting", "approve") in typed
    assert ("signalled", "pending", "approve") in typed
    assert all(e["signal"] is None for e in events if e["type"] not in ("waiting", "signalled"))
    late = await server.graphql(SIGNAL, id=instance_id, name="approve")
    assert codes_of(late) == ["CONFLICT"]


async def test_approval_times_out(server: LiveServer) -> None:
    instance_id = await enqueue(server, "approval", {"timeoutSeconds": 0.2})
    done = await until_status(server, instance_id, "completed")
    assert done["result"] == {"approved": False, "timedOut": True}


async def test_signal_errors_have_their_codes(server: LiveServer) -> None:
    unknown = await server.graphql(
        SIGNAL, id="00000000-0000-4000-8000-000000000000", name="approve"
    )
    assert codes_of(unknown) == ["NOT_FOUND"]
    instance_id = await enqueue(server, "approval", {"timeoutSeconds": 60})
    bad_name = await server.graphql(SIGNAL, id=instance_id, name="no spaces allowed")
    assert codes_of(bad_name) == ["BAD_USER_INPUT"]
    too_big = await server.graphql(SIGNAL, id=instance_id, name="approve", payload="x" * 300_000)
    assert codes_of(too_big) == ["BAD_USER_INPUT"]
    assert "payload" in too_big["errors"][0]["message"]
    assert (await instance(server, instance_id))["status"] in ("pending", "running", "waiting")


async def test_review_refuses_bad_input_then_takes_the_decision(server: LiveServer) -> None:
    instance_id = await enqueue(server, "review", {"ignored": True})
    paused = await until_status(server, instance_id, "paused")
    assert paused["checkpoint"] == "decide"
    assert paused["checkpointInputSchema"] == REVIEW_SCHEMA
    assert paused["waitingReason"]["code"] == "AWAITING_REVIEW"
    refused = await server.graphql(RESUME, id=instance_id, input={"decision": "maybe"})
    [error] = refused["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert error["extensions"]["path"] == "$.decision"
    assert error["extensions"]["problems"][0]["path"] == "$.decision"
    assert "$.decision" in error["message"]
    missing = await server.graphql(RESUME, id=instance_id)
    assert codes_of(missing) == ["BAD_USER_INPUT"]
    assert (await instance(server, instance_id))["status"] == "paused"
    resumed = await server.graphql(RESUME, id=instance_id, input={"decision": "reject"})
    assert resumed["data"]["resumeWorkflow"] == {"status": "pending", "checkpoint": None}
    done = await until_status(server, instance_id, "completed")
    assert done["result"] == {"decision": "reject", "comment": None}
    assert done["checkpointInputSchema"] is None


async def test_a_refused_input_is_told_in_json_as_the_client_sent_it(server: LiveServer) -> None:
    """A JSON client sent null, or "maybe": the refusal says null and "maybe", not Python's
    None and 'maybe', in the message and in every problem."""
    instance_id = await enqueue(server, "review", {})
    await until_status(server, instance_id, "paused")
    literal = (
        f'mutation {{ resumeWorkflow(instanceID: "{instance_id}", input: null) {{ status }} }}'
    )
    for body, said in (
        (await server.graphql(RESUME, id=instance_id, input=None), 'null is not of type "object"'),
        (await server.graphql(literal), 'null is not of type "object"'),
        (
            await server.graphql(RESUME, id=instance_id, input={"decision": "maybe"}),
            '"maybe" is not one of ["approve", "reject"]',
        ),
        (
            await server.graphql(RESUME, id=instance_id, input={"comment": "fine"}),
            '"decision" is a required property',
        ),
    ):
        [error] = body["errors"]
        assert error["extensions"]["code"] == "BAD_USER_INPUT"
        assert error["message"].endswith(said), error
        problems = error["extensions"]["problems"]
        assert said in [problem["message"] for problem in problems], problems
        for text in (error["message"], *(problem["message"] for problem in problems)):
            for python in ("None", "'maybe'", "'decision'"):
                assert python not in text, text
    assert (await instance(server, instance_id))["status"] == "paused"


async def test_a_cancelled_pause_keeps_no_checkpoint_label(server: LiveServer) -> None:
    """`checkpoint` is the label while paused: cancelling a paused instance, alone or in bulk,
    clears it, as a resume and an expiry do."""
    alone = await enqueue(server, "review", {})
    in_bulk = await enqueue(server, "review", {})
    for instance_id in (alone, in_bulk):
        assert (await until_status(server, instance_id, "paused"))["checkpoint"] == "decide"
    cancel = "mutation ($id: ID!) { cancelWorkflow(instanceID: $id) { status checkpoint } }"
    cancelled = await server.graphql(cancel, id=alone)
    assert cancelled["data"]["cancelWorkflow"] == {"status": "cancelled", "checkpoint": None}
    bulk = 'mutation { cancelWorkflows(filter: {name: "review"}) { matched changed } }'
    assert (await server.graphql(bulk))["data"]["cancelWorkflows"] == {"matched": 1, "changed": 1}
    for instance_id in (alone, in_bulk):
        assert await instance(server, instance_id) == {
            "status": "cancelled",
            "result": None,
            "checkpoint": None,
            "checkpointInputSchema": None,
            "waitingReason": None,
        }


async def test_review_whose_schema_cannot_be_used_is_refused_not_masked(
    server: LiveServer, admin: asyncpg.Connection
) -> None:
    instance_id = await enqueue(server, "review", {})
    await until_status(server, instance_id, "paused")
    # As a release that did not check a schema's references let the pause keep it.
    await admin.execute(
        "UPDATE laneway.instances SET wait = jsonb_set(wait, '{input_schema}', $2::jsonb)"
        " WHERE instance_id = $1",
        UUID(instance_id),
        '{"$ref": "#/$defs/nope"}',
    )
    refused = await server.graphql(RESUME, id=instance_id, input={"decision": "approve"})
    [error] = refused["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert "input schema of checkpoint 'decide' cannot be used" in error["message"]
    assert error["extensions"]["path"] == "$"
    bulk = await server.graphql(RESUME_ALL, name="review")
    assert bulk["data"]["resumeWorkflows"] == {"matched": 1, "changed": 0}
    assert (await instance(server, instance_id))["status"] == "paused"
