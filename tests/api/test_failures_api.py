"""`failures` and `lastError` over GraphQL (issue #20, point 3), on the `flaky` example.

A failure's traceback is the user's handler's, shown on purpose, so these queries are posted
without LiveServer.graphql's check that no traceback leaks from the API's own errors.
"""

from typing import Any

from tests.api.conftest import LiveServer
from tests.api.test_waits_api import enqueue, until_status

FAILURES = """query ($id: ID!, $limit: Int) { workflowInstance(instanceID: $id) {
  status attempts lastError
  failures(limit: $limit) { attempt at type message traceback stage operation } } }"""


async def query(server: LiveServer, **variables: Any) -> dict[str, Any]:
    response = await server.client.post(
        "/graphql", json={"query": FAILURES, "variables": variables}
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_failures_are_newest_first_with_their_tracebacks(server: LiveServer) -> None:
    instance_id = await enqueue(server, "flaky", {"failTimes": 5})
    await until_status(server, instance_id, "failed")
    body = await query(server, id=instance_id, limit=10)
    found = body["data"]["workflowInstance"]
    assert found["attempts"] == 3
    assert found["lastError"] == "RuntimeError: flaky failure 3"
    failures = found["failures"]
    assert [(f["attempt"], f["type"], f["message"]) for f in failures] == [
        (3, "RuntimeError", "flaky failure 3"),
        (2, "RuntimeError", "flaky failure 2"),
        (1, "RuntimeError", "flaky failure 1"),
    ]
    assert all("in _attempt" in f["traceback"] for f in failures)
    assert all(f["stage"] is None and f["operation"] is None for f in failures)
    assert failures[0]["at"] >= failures[1]["at"] >= failures[2]["at"]
    newest = await query(server, id=instance_id, limit=1)
    assert newest["data"]["workflowInstance"]["failures"] == failures[:1]
    refused = await query(server, id=instance_id, limit=0)
    assert refused["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"


async def test_a_completed_instance_keeps_its_earlier_attempts_error(server: LiveServer) -> None:
    instance_id = await enqueue(server, "flaky", {"failTimes": 1})
    await until_status(server, instance_id, "completed")
    found = (await query(server, id=instance_id))["data"]["workflowInstance"]
    assert found["attempts"] == 2
    assert found["lastError"] == "RuntimeError: flaky failure 1"
    assert [f["attempt"] for f in found["failures"]] == [1]
