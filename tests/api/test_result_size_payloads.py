"""The result-size cap counts a JSON value at its largest (result_size.PAYLOAD_COST): an
instance's params, result and checkpointInputSchema, a schedule's params, each up to 256 KiB;
and a long text at its largest in the same unit (result_size.LONG_TEXTS): a failure's traceback
and message, an instance's lastError, an event's or an operation's error.

An outside audit: counted 1 each, `{ workflowInstances(limit: 500) { instanceID params result }
}` (estimated about 1,500) answered 256 MB and took the server from 103 MB to 804 MB; five
aliases of it in one request, 1.28 GB and 3.7 GB.
"""

from typing import Any

from laneway.api.graphql.result_size import (
    LONG_TEXTS,
    MAX_COST,
    PAYLOAD_COST,
    RESOLVER_COST,
)
from laneway.engine.failures import MAX_MESSAGE_CHARS, MAX_TRACEBACK_CHARS
from laneway.engine.operation_attempt import MAX_REASON_CHARS
from laneway.engine.payloads import MAX_PAYLOAD_BYTES
from tests.api.conftest import LiveServer
from tests.api.test_result_size import cost, quiet_server, refused_cost

__all__ = ["quiet_server"]  # the fixture

AUDITS = "{ workflowInstances(limit: 500) { instanceID params result } }"
WITHOUT_PAYLOADS = "{ workflowInstances(limit: 500) { instanceID status } }"


def test_a_json_value_counts_what_its_largest_weighs() -> None:
    read = RESOLVER_COST
    assert cost("{ workflowInstances(limit: 2) { params } }") == 1 + read + 2 * (
        1 + 1 + PAYLOAD_COST
    )
    three = '{ workflowInstance(instanceID: "x") { params result checkpointInputSchema } }'
    assert cost(three) == 1 + read + 3 * (1 + PAYLOAD_COST)
    assert cost("{ schedules { params } }") == 1 + read + 20 * (1 + 1 + PAYLOAD_COST)
    # The cap bounds an answer's payloads to about 31 MiB, and a page of the default size
    # (50) with params and results fits.
    assert MAX_COST // (1 + PAYLOAD_COST) * MAX_PAYLOAD_BYTES <= 31 * 1024 * 1024
    assert cost("{ workflowInstances { instanceID params result } }") <= MAX_COST


async def test_payloads_over_a_large_page_are_refused_and_the_page_without_them_runs(
    quiet_server: LiveServer,
) -> None:
    await quiet_server.graphql('mutation { enqueueWorkflow(name: "noop") { created } }')
    documents: dict[str, Any] = {
        "list": (AUDITS, {}),
        "five aliases": ("{ " + " ".join(f"a{i}: {AUDITS[2:-2]}" for i in range(5)) + " }", {}),
        "connection": (
            "query ($n: Int) { workflowInstancesConnection(first: $n) {"
            " edges { node { result } } } }",
            {"n": 500},
        ),
        "schema": (
            "{ workflowInstances(limit: 125) { checkpointInputSchema } }",
            {},
        ),
    }
    for case, (query, variables) in documents.items():
        response = await quiet_server.client.post(
            "/graphql", json={"query": query, "variables": variables}
        )
        assert response.status_code == 200, case
        body = response.json()
        assert body.get("data") is None, case
        assert refused_cost(body["errors"]) == cost(query, variables) > MAX_COST, case
    assert cost(AUDITS) > 8 * MAX_COST
    # The same page without its payloads runs; so do payloads over a page of 50.
    assert cost(WITHOUT_PAYLOADS) <= MAX_COST
    body = await quiet_server.graphql(WITHOUT_PAYLOADS)
    assert [i["status"] for i in body["data"]["workflowInstances"]] == ["pending"]
    fifty = AUDITS.replace("500", "50")
    assert cost(fifty) <= MAX_COST
    body = await quiet_server.graphql(fifty)
    assert body["data"]["workflowInstances"][0]["params"] is None


FAILURE_TEXTS = "{ workflowInstances(limit: 500) { failures(limit: 130) { attempt traceback } } }"
WITHOUT_TEXTS = "{ workflowInstances(limit: 500) { failures(limit: 130) { attempt at } } }"


def test_a_long_text_counts_what_its_largest_weighs() -> None:
    # An outside audit: counted 1 each, a page of 500 instances' tracebacks (8,000 characters
    # each, 130 failures an instance) could answer about 500 MB.
    read = RESOLVER_COST
    texts = LONG_TEXTS
    traceback = texts["AttemptFailure", "traceback"]
    assert traceback == -(-MAX_TRACEBACK_CHARS // 130)
    failures = "{ workflowInstances(limit: 2) { failures(limit: 3) { traceback } } }"
    assert cost(failures) == 1 + read + 2 * (1 + (1 + read + 3 * (1 + 1 + traceback)))
    # Wherever it appears: an instance's lastError, an event's and an operation's error.
    assert texts["WorkflowInstanceStatus", "lastError"] == -(-MAX_MESSAGE_CHARS // 130)
    assert texts["WorkflowOperation", "error"] == -(-MAX_REASON_CHARS // 130)
    one = '{ workflowInstance(instanceID: "x") { lastError } }'
    assert cost(one) == 1 + read + 1 + texts["WorkflowInstanceStatus", "lastError"]
    # A short text still counts 1.
    assert cost('{ workflowInstance(instanceID: "x") { name } }') == 1 + read + 1


async def test_long_texts_over_a_large_page_are_refused_and_the_page_without_them_runs(
    quiet_server: LiveServer,
) -> None:
    await quiet_server.graphql('mutation { enqueueWorkflow(name: "noop") { created } }')
    refused = (await quiet_server.client.post("/graphql", json={"query": FAILURE_TEXTS})).json()
    assert refused.get("data") is None
    assert refused_cost(refused["errors"]) == cost(FAILURE_TEXTS) > MAX_COST
    body = await quiet_server.graphql(WITHOUT_TEXTS)
    assert "errors" not in body
    assert body["data"]["workflowInstances"] == [{"failures": []}]
