"""The result-size cap (laneway/api/graphql/result_size.py): a document whose answer could be
huge is refused before anything runs, over HTTP (POST and GET) and websockets, with the code
of the other document limits, and every document Laneway's own clients send stays well within
it. What a JSON value counts: test_result_size_payloads.py.

One legal query of 15 aliases, each 500 instances with their events, failures and operations
(an outside audit's), delayed every other request of the process by seconds: two at once made
/healthz answer 503, four timed out. Depth, aliases and tokens were the only limits; the
lists' sizes multiplied unchecked.
"""

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from graphql import (
    GraphQLError,
    OperationDefinitionNode,
    get_operation_ast,
    parse,
    validate,
)
from websockets.asyncio.client import connect
from websockets.typing import Subprotocol

from laneway.api.graphql import result_size
from laneway.api.graphql.documents import cache_info
from laneway.api.graphql.query import LanewayQuery
from laneway.api.graphql.result_size import (
    MAX_COST,
    RESOLVER_COST,
    UNSIZED_LIST,
    ResultSizeGuard,
    ResultSizeLimit,
    operation_cost,
)
from laneway.api.graphql.schema import (
    ErrorCodes,
    Extension,
    LanewaySchema,
    schema,
    schema_extensions,
)
from laneway.cli import instances, queues
from laneway.engine import Engine
from laneway.engine.page_calls import MAX_PAGE_SIZE
from laneway.engine.queue_calls import MAX_HISTORY_MINUTES
from tests.api.conftest import LiveServer, live_server, make_settings
from tests.test_cli_answers import DOCUMENTS as CLI_DOCUMENTS

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "laneway" / "api" / "static" / "dashboard.html"
PROTOCOL = Subprotocol("graphql-transport-ws")
VALIDATION_FAILED = "GRAPHQL_VALIDATION_FAILED"
REFUSAL = re.compile(r"estimated cost of ([\d,]+), over the maximum of ([\d,]+)")

AUDIT = (
    "{ "
    + " ".join(
        f"a{i}: workflowInstances(limit: 500, offset: 0) {{ instanceID status params result"
        " waitingReason { code message } events(limit: 500) { eventID type }"
        " operations { operationID } failures(limit: 500) { message traceback } }"
        for i in range(15)
    )
    + " }"
)
BIG_BUT_LEGAL = (
    "{ workflowInstances(limit: 500) { instanceID status events(limit: 100) { eventID type } } }"
)
BY_VARIABLES = """query Nested($instances: Int, $events: Int) {
  workflowInstances(limit: $instances) { instanceID events(limit: $events) { eventID type } }
}"""


def cost(query: str, variables: Mapping[str, Any] | None = None) -> int:
    document = parse(query)
    operation = get_operation_ast(document)
    assert operation is not None
    return operation_cost(schema._schema, document, operation, variables)


def refused_cost(errors: list[dict[str, Any]]) -> int:
    """The estimate a refusal names (after checking its code and the cap it names)."""
    (error,) = errors
    assert error["extensions"]["code"] == VALIDATION_FAILED, error
    found = REFUSAL.search(error["message"])
    assert found is not None, error["message"]
    assert found[2] == f"{MAX_COST:,}"
    return int(found[1].replace(",", ""))


@pytest.fixture
async def quiet_server(database_url: str) -> AsyncIterator[LiveServer]:
    """No engine: what the database holds is what the test wrote."""
    async with live_server(make_settings(database_url, engine_enabled=False)) as live:
        yield live


@pytest.fixture
def lists_read(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every call of the engine's instance list (workflowInstances' resolver) from now on."""
    calls: list[object] = []
    original = Engine.list_instances

    async def spying(self: Engine, *args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(Engine, "list_instances", spying)
    return calls


# -- refused before anything runs -----------------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "status"),
    [("application/json", 200), ("application/graphql-response+json", 400)],
)
async def test_the_audits_query_is_refused_with_its_estimate_and_nothing_runs(
    quiet_server: LiveServer, lists_read: list[object], accept: str, status: int
) -> None:
    await quiet_server.graphql('mutation { enqueueWorkflow(name: "noop") { created } }')
    validations = cache_info().validations
    for method in ("POST", "GET"):
        request: dict[str, Any] = (
            {"json": {"query": AUDIT}} if method == "POST" else {"params": {"query": AUDIT}}
        )
        response = await quiet_server.client.request(
            method, "/graphql", headers={"accept": accept}, **request
        )
        assert response.status_code == status, response.text
        body = response.json()
        assert body.get("data") is None
        assert refused_cost(body["errors"]) == cost(AUDIT) > 100 * MAX_COST
    assert lists_read == []
    # Judged once, as the depth and alias limits are: the second request reused the verdict.
    assert cache_info().validations <= validations + 1
    # The same document within the cap runs, and reads the list.
    small = AUDIT.replace("500", "2")
    assert cost(small) <= MAX_COST
    body = await quiet_server.graphql(small)
    assert "errors" not in body
    assert len(body["data"]["a0"]) == 1
    assert len(lists_read) == 15


async def test_the_audits_query_is_refused_over_a_websocket(
    quiet_server: LiveServer, lists_read: list[object]
) -> None:
    async with connect(quiet_server.ws_url, subprotocols=[PROTOCOL]) as ws:
        await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": AUDIT}}))
        async with asyncio.timeout(10):
            reply = json.loads(await ws.recv())
        assert (reply["id"], reply["type"]) == ("1", "error"), reply
        assert refused_cost(reply["payload"]) == cost(AUDIT)
        # The socket stays open for what fits.
        frame = {"id": "2", "type": "subscribe", "payload": {"query": "{ __typename }"}}
        await ws.send(json.dumps(frame))
        async with asyncio.timeout(10):
            reply = json.loads(await ws.recv())
        assert reply["payload"] == {"data": {"__typename": "Query"}}, reply
    assert lists_read == []


async def test_a_mutation_over_the_cap_writes_nothing(quiet_server: LiveServer, admin: Any) -> None:
    requests = ", ".join('{name: "noop"}' for _ in range(200))
    query = (
        f"mutation {{ enqueueWorkflows(requests: [{requests}]) {{ instanceID"
        " instance { events(limit: 500) { eventID type at } } } }"
    )
    assert cost(query) > MAX_COST
    response = await quiet_server.client.post("/graphql", json={"query": query})
    assert refused_cost(response.json()["errors"]) == cost(query)
    assert await admin.fetchval("SELECT count(*) FROM laneway.instances") == 0


# -- what counts ----------------------------------------------------------------------------


def test_what_an_estimate_counts() -> None:
    read = RESOLVER_COST  # a field read from the database, for each object it is asked of
    # Each value counts 1: a field, and each item of a list, sized by its `limit`.
    two_by_three = "{ workflowInstances(limit: 2) { events(limit: 3) { eventID type } } }"
    assert cost(two_by_three) == 1 + read + 2 * (1 + (1 + read + 3 * (1 + 2)))
    # Left out or null, a size is the argument's default (events: 100); aliases add.
    defaulted = "{ a: workflowInstance(instanceID: ID) { events { eventID } } b: __typename }"
    assert cost(defaulted.replace("ID)", '"x")')) == 1 + read + (1 + read + 100 * 2) + 1
    nulls = "{ workflowInstances(limit: null) { events(limit: null) { eventID } } }"
    assert cost(nulls) == 1 + read + 50 * (1 + (1 + read + 100 * 2))
    # A connection's `first` sizes its edges; a list no argument sizes counts UNSIZED_LIST.
    page = "{ workflowInstancesConnection(first: 7) { edges { node { operations { type } } } } }"
    assert cost(page) == 1 + read + (1 + 7 * (1 + (1 + (1 + read + UNSIZED_LIST * 2))))
    # A field read without the database (workflows, an instance's plain fields) counts 1.
    assert cost("{ workflows { name stages } }") == 1 + UNSIZED_LIST * (1 + 1 + 1 + UNSIZED_LIST)
    # Introspection reads no data, and is off where GraphiQL is.
    assert cost("{ __schema { types { fields { name } } } }") == 1


async def test_a_big_but_legal_query_runs(quiet_server: LiveServer) -> None:
    assert MAX_COST // 2 < cost(BIG_BUT_LEGAL) <= MAX_COST
    for _ in range(3):
        await quiet_server.graphql('mutation { enqueueWorkflow(name: "noop") { created } }')
    body = await quiet_server.graphql(BIG_BUT_LEGAL)
    assert "errors" not in body
    assert len(body["data"]["workflowInstances"]) == 3
    assert all(i["events"] for i in body["data"]["workflowInstances"])


async def test_limits_given_as_variables_count(
    quiet_server: LiveServer, lists_read: list[object]
) -> None:
    async def post(variables: dict[str, Any], query: str = BY_VARIABLES) -> dict[str, Any]:
        response = await quiet_server.client.post(
            "/graphql", json={"query": query, "variables": variables}
        )
        body: dict[str, Any] = response.json()
        return body

    big = {"instances": 500, "events": 500}
    assert cost(BY_VARIABLES, big) > MAX_COST
    assert refused_cost((await post(big))["errors"]) == cost(BY_VARIABLES, big)
    by_get = await quiet_server.client.get(
        "/graphql", params={"query": BY_VARIABLES, "variables": json.dumps(big)}
    )
    assert refused_cost(by_get.json()["errors"]) == cost(BY_VARIABLES, big)
    # An Int sent as a float is the same Int.
    floats = {"instances": 500.0, "events": 500.0}
    assert refused_cost((await post(floats))["errors"]) == cost(BY_VARIABLES, big)
    # A variable's default counts when the request leaves it out.
    defaulted = BY_VARIABLES.replace("$events: Int", "$events: Int = 500")
    assert refused_cost((await post({"instances": 500}, defaulted))["errors"]) > MAX_COST
    # Null is the field's own default (events: 100): 500 × 100 fits.
    assert "errors" not in await post({"instances": 500, "events": None})
    assert "errors" not in await post({"instances": 10, "events": 500})
    # A websocket's operation counts its variables too.
    async with connect(quiet_server.ws_url, subprotocols=[PROTOCOL]) as ws:
        await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        payload = {"query": BY_VARIABLES, "variables": big}
        await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": payload}))
        async with asyncio.timeout(10):
            reply = json.loads(await ws.recv())
        assert (reply["id"], reply["type"]) == ("1", "error"), reply
        assert refused_cost(reply["payload"]) == cost(BY_VARIABLES, big)
    assert len(lists_read) == 2  # only the two that fit ran


@pytest.mark.parametrize("before_validation", [True, False])
async def test_the_guard_refuses_before_or_after_the_validation_cache(
    before_validation: bool,
) -> None:
    # Without DocumentCache before it, the guard's refusal joins Strawberry's own validation.
    # No context: were a resolver reached, it would fail with a masked error, not this one.
    extensions: list[Extension] = (
        [ResultSizeGuard, ErrorCodes] if before_validation else schema_extensions()
    )
    hosted = LanewaySchema(query=LanewayQuery, extensions=extensions)
    for _ in range(2):
        big = {"instances": 500, "events": 500}
        result = await hosted.execute(BY_VARIABLES, variable_values=big)
        assert result.data is None
        [error] = result.errors or []
        assert error.extensions == {"code": VALIDATION_FAILED}
        assert REFUSAL.search(error.message) is not None
        honest = await hosted.execute("{ __typename }")
        assert honest.data == {"__typename": "Query"}


def test_a_variable_that_is_refused_anyway_keeps_its_own_refusal() -> None:
    # Out of range: the input guard's BAD_USER_INPUT names the argument; counted at the most
    # the guard allows, the estimate does not get in its way.
    assert cost(BY_VARIABLES, {"instances": 10**9, "events": 1}) == cost(
        BY_VARIABLES, {"instances": 500, "events": 1}
    )


async def test_fragments_and_inline_fragments_count(quiet_server: LiveServer) -> None:
    events = "events(limit: 500) { eventID type }"
    documents = {
        "a spread": f"""{{ workflowInstances(limit: 500) {{ ...Events }} }}
            fragment Events on WorkflowInstanceStatus {{ {events} }}""",
        "an inline fragment": f"""{{ workflowInstances(limit: 500) {{
            ... on WorkflowInstanceStatus {{ {events} }} }} }}""",
        "a connection's edges in a fragment": f"""{{
            workflowInstancesConnection(first: 500) {{ ...Page }} }}
            fragment Page on WorkflowInstanceConnection {{ edges {{ node {{ {events} }} }} }}""",
        "fragments spread in fragments": f"""{{ workflowInstances(limit: 500) {{ ...A }} }}
            fragment A on WorkflowInstanceStatus {{ ...B ...B }}
            fragment B on WorkflowInstanceStatus {{ ... on WorkflowInstanceStatus {{ ...C }} }}
            fragment C on WorkflowInstanceStatus {{ {events} }}""",
    }
    for case, query in documents.items():
        response = await quiet_server.client.post("/graphql", json={"query": query})
        assert refused_cost(response.json()["errors"]) == cost(query) > MAX_COST, case
    # Each spread of a fragment counts, however deep in other fragments.
    fragment = "fragment Page on Query { workflowInstances(limit: 500) { instanceID status } }"
    chained = [f"fragment F{n} on Query {{ ...F{n + 1} ...F{n + 1} }}" for n in range(6)]
    nested = " ".join(
        ["{ ...F0 }", *chained, "fragment F6 on Query { ...Page ...Page ...Page }", fragment]
    )
    response = await quiet_server.client.post("/graphql", json={"query": nested})
    assert refused_cost(response.json()["errors"]) == 2**6 * 3 * cost(f"{{ ...Page }} {fragment}")


def test_a_long_chain_of_fragments_is_estimated_in_linear_time() -> None:
    # Each fragment spreads the next twice: 2^150 spreads of the last, in 1,500 tokens. Each
    # fragment is walked once, after those it spreads, and without recursion between them.
    chain = " ".join(f"fragment F{n} on Query {{ ...F{n + 1} ...F{n + 1} }}" for n in range(150))
    query = f"{{ ...F0 }} {chain} fragment F150 on Query {{ __typename }}"
    assert cost(query) == 2**150
    document = parse(query)
    errors = validate(schema._schema, document, [ResultSizeLimit])
    assert [REFUSAL.search(e.message) is not None for e in errors] == [True]
    # A cycle, which validation refuses, is not followed.
    cycle = "{ ...A } fragment A on Query { ...B workflows { name } } fragment B on Query { ...A }"
    assert cost(cycle) == 1 + UNSIZED_LIST * 2  # workflows (no database read) and its names


# -- Laneway's own clients --------------------------------------------------------------------


def dashboard_documents() -> dict[str, tuple[str, dict[str, Any]]]:
    """Every document the dashboard sends, with the largest variables it sends them with."""
    script = DASHBOARD.read_text(encoding="utf-8")
    constants: dict[str, str] = {}
    pattern = r'const (\w+) =\s*(?:`((?:[^`\\]|\\.)*)`|"((?:[^"\\]|\\.)*)"|(\d+));'
    for match in re.finditer(pattern, script):
        constants[match[1]] = next(group for group in match.groups()[1:] if group is not None)

    def resolved(text: str) -> str:
        return re.sub(
            r"\$\{(\w+)\}",
            lambda m: resolved(constants[m[1]]) if m[1] in constants else m[0],
            text,
        )

    def inserted(template: str, name: str, value: object) -> str:
        return resolved(template.replace("${" + name + "}", str(value)))

    operation = re.compile(r"\s*(query|mutation|subscription)\b|\s*\{")
    found: dict[str, tuple[str, dict[str, Any]]] = {
        name: (resolved(text), {}) for name, text in constants.items() if operation.match(text)
    }
    # The list's largest page: the biggest "Per page" choice.
    per_page = re.search(r'<select id="filter-limit".*?</select>', script, re.S)
    assert per_page is not None
    largest = max(int(v) for v in re.findall(r'<option value="(\d+)"', per_page[0]))
    found["INSTANCES_QUERY"] = (found["INSTANCES_QUERY"][0], {"first": largest})
    # The documents functions build: queue histories a chunk at a time, actions, bulk actions.
    chunk = int(constants["HISTORY_CHUNK"])
    history = re.search(r"`(q\$\{i\}: queueHistory[^`]*)`", script)
    assert history is not None
    found["historyQuery"] = (
        "query QueueHistory("
        + ", ".join(f"$n{i}: String!" for i in range(chunk))
        + ") { "
        + " ".join(inserted(history[1], "i", i) for i in range(chunk))
        + " }",
        {f"n{i}": "q" for i in range(chunk)},
    )
    act = re.search(r"`(mutation Act[^`]*)`", script)
    bulk = re.search(r"function bulkMutation\(field\) \{\s*return `([^`]*)`", script)
    assert act is not None
    assert bulk is not None
    for field in re.findall(r'field: "(\w+)"', script):
        if field.endswith("s"):
            found[f"bulkMutation({field})"] = (inserted(bulk[1], "field", field), {})
        else:
            found[f"Act({field})"] = (inserted(act[1], "action.field", field), {})
    # Every request the page makes sends one of these.
    sent = set(re.findall(r"request\(\s*([^,)]+)", script)) - {"query"}  # the function itself
    builders = {"historyQuery(names", "bulkMutation(action.field", "`mutation Act($id: ID!"}
    assert sent - builders <= set(found), sent - builders - set(found)
    assert "payload: { query: EVENTS_SUBSCRIPTION" in script
    return found


def cli_documents() -> dict[str, tuple[str, dict[str, Any]]]:
    """The CLI's documents (as test_cli_answers lists them), at their largest pages."""
    largest = {
        instances.PAGE: {"first": MAX_PAGE_SIZE},
        queues.QUEUE_HISTORY: {"minutes": MAX_HISTORY_MINUTES},
    }
    return {f"cli {n}": (d, largest.get(d, {})) for n, d in enumerate(CLI_DOCUMENTS)}


def written_documents() -> dict[str, tuple[str, dict[str, Any]]]:
    """The documents of README.md and docs/: in curl commands, Python strings, code spans."""
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        candidates = [
            json.loads(f'"{q}"') for q in re.findall(r'"query":\s*"((?:[^"\\]|\\.)*)"', text)
        ]
        candidates += re.findall(
            r'"""\s*((?:query|mutation|subscription)\b.*?|\{.*?)"""', text, re.S
        )
        candidates += re.findall(r"`(\{[^`]*\})`", text)
        for candidate in candidates:
            try:
                document = parse(candidate)
            except GraphQLError:
                continue
            if not validate(schema._schema, document):  # not a selection shown alone
                found[f"{path.name}: {' '.join(candidate.split())}"] = (candidate, {})
    return found


ClientDocuments = Callable[[], dict[str, tuple[str, dict[str, Any]]]]


@pytest.mark.parametrize(
    ("documents", "expected"),
    [
        (
            dashboard_documents,
            {"INSTANCES_QUERY", "INSTANCE_QUERY", "historyQuery", "CATALOG_QUERY"},
        ),
        (cli_documents, {f"cli {n}" for n in range(len(CLI_DOCUMENTS))}),
        (
            written_documents,
            {
                'README.md: { workflowInstances(name: "hello", limit: 10) { instanceID status'
                " result } }"
            },
        ),
    ],
)
def test_laneways_own_documents_stay_well_within_the_cap(
    documents: ClientDocuments, expected: set[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Within a tenth of the cap, and within a quarter with their JSON values and long texts at
    # their largest (the CLI's schedules, 20 counted with their params: about 50,000).
    found = documents()
    assert expected <= set(found)
    for name, (query, variables) in found.items():
        document = parse(query)
        assert validate(schema._schema, document) == [], name
        for operation in document.definitions:
            assert isinstance(operation, OperationDefinitionNode)
            estimate = operation_cost(schema._schema, document, operation, variables)
            assert estimate <= MAX_COST // 4, name
            with monkeypatch.context() as weightless:
                weightless.setattr(result_size, "PAYLOAD_COST", 0)
                weightless.setattr(result_size, "LONG_TEXTS", {})
                estimate = operation_cost(schema._schema, document, operation, variables)
            assert estimate <= MAX_COST // 10, name
