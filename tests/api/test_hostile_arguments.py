"""Hostile values for every argument the schema has, against a real uvicorn server.

The targets come from the schema itself (laneway.api.graphql.schema.schema): every argument of
every root field of Query, Mutation and Subscription, every argument of the fields reachable
under them (`events(limit:)` of an instance), list items and input-object fields, so a new
field or argument is covered with no new test. Each target gets each hostile value (NUL, lone
surrogates, 10^19, -1, a 10^6-character string, JSON nested past 64 levels) as a variable and,
where GraphQL can write it, as a literal; required arguments around it get a valid value.
Queries and mutations go over HTTP, subscriptions over a websocket.

The answer is never HTTP 5xx, never "Unexpected error." (nor a masked error's request id). A
refused value writes nothing (rows of instances, events, schedules, queues and locks counted
before and after). Some values are legitimately accepted, and only these: a number that the
argument's rule in RULES (input_guard.py) allows (-1 is a fine `priority`) or that has no rule,
and a JSON number (10^19 and -1 are data in `params`); an accepted mutation may write.
"""

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest
from graphql import (
    GraphQLArgument,
    GraphQLField,
    GraphQLInputField,
    GraphQLInputObjectType,
    GraphQLInputType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLScalarType,
    get_named_type,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from laneway.api.graphql.input_guard import RULES
from laneway.api.graphql.schema import schema
from tests.api.conftest import FORBIDDEN_TEXT, LiveServer, live_server, make_settings

PROTOCOL = "graphql-transport-ws"
TABLES = ("instances", "events", "schedules", "queues", "locks")
FILLER_UUID = "00000000-0000-4000-8000-000000000000"
WS_LONG = 60_000  # a websocket frame is at most 64 KiB (1009 above): the longest that fits
MAX_NESTED_TARGET_DEPTH = 3


@dataclass(frozen=True)
class Target:
    """One place a value can go: `path` is the root field and the fields down to the one
    whose argument `argument` holds it; `inside` leads from the argument to the value
    (`[]` for a list item, a name for an input-object field)."""

    operation: str  # query, mutation, subscription
    path: tuple[GraphQLField, ...]
    names: tuple[str, ...]
    argument: str
    inside: tuple[str, ...]
    leaf: GraphQLInputType  # the type of the value itself (a scalar)

    @property
    def id(self) -> str:
        return ".".join(self.names) + f"({self.argument}{''.join(self.inside)})"

    @property
    def leaf_name(self) -> str:
        return get_named_type(self.leaf).name

    @property
    def rule_name(self) -> str:
        """The name the guard's rule is keyed by: the argument, or the input field."""
        named = [step for step in self.inside if step != "[]"]
        return named[-1].lstrip(".") if named else self.argument


def leaves(
    type_: GraphQLInputType, inside: tuple[str, ...] = (), depth: int = 0
) -> Iterator[tuple[tuple[str, ...], GraphQLInputType]]:
    """Every scalar place inside a value of `type_`: list items and input-object fields."""
    inner = type_.of_type if isinstance(type_, GraphQLNonNull) else type_
    if isinstance(inner, GraphQLList):
        yield from leaves(inner.of_type, (*inside, "[]"), depth + 1)
    elif isinstance(inner, GraphQLInputObjectType):
        if depth < MAX_NESTED_TARGET_DEPTH:
            for name, field in inner.fields.items():
                yield from leaves(field.type, (*inside, "." + name), depth + 1)
    else:
        yield inside, type_


def schema_targets() -> list[Target]:
    graphql_schema = schema._schema
    roots = {
        "query": graphql_schema.query_type,
        "mutation": graphql_schema.mutation_type,
        "subscription": graphql_schema.subscription_type,
    }
    found: list[Target] = []
    seen_nested: set[tuple[str, str]] = set()

    def visit(
        operation: str,
        path: tuple[GraphQLField, ...],
        names: tuple[str, ...],
        depth: int,
    ) -> None:
        field = path[-1]
        for argument, definition in field.args.items():
            for inside, leaf in leaves(definition.type):
                found.append(Target(operation, path, names, argument, inside, leaf))
        returned = get_named_type(field.type)
        if not isinstance(returned, GraphQLObjectType) or depth >= MAX_NESTED_TARGET_DEPTH:
            return
        for name, child in returned.fields.items():
            if child.args and (returned.name, name) not in seen_nested:
                seen_nested.add((returned.name, name))  # one path to each nested field
                visit(operation, (*path, child), (*names, name), depth + 1)

    for operation, root in roots.items():
        assert root is not None
        for name, field in root.fields.items():
            visit(operation, (field,), (name,), 0)
    return found


TARGETS = schema_targets()


def filler(type_: GraphQLInputType, name: str) -> str:
    """A valid literal of `type_` for a required argument or input field."""
    inner = type_.of_type if isinstance(type_, GraphQLNonNull) else type_
    if isinstance(inner, GraphQLList):
        return "[" + filler(inner.of_type, name) + "]"
    if isinstance(inner, GraphQLInputObjectType):
        return "{" + required(inner.fields) + "}"
    assert isinstance(inner, GraphQLScalarType), inner
    if inner.name == "ID":
        return json.dumps(FILLER_UUID if name.endswith("ID") else "0")
    return {"String": '"noop"', "Int": "1", "Float": "1.0", "Boolean": "false"}.get(
        inner.name, "{}"
    )


def required(
    definitions: dict[str, GraphQLArgument] | dict[str, GraphQLInputField],
    skip: str | None = None,
) -> str:
    return ", ".join(
        f"{name}: {filler(d.type, name)}"
        for name, d in definitions.items()
        if name != skip and isinstance(d.type, GraphQLNonNull) and d.default_value is None
    )


def literal(value: object) -> str | None:
    """`value` as a GraphQL literal, or None where GraphQL has no way to write it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return json.dumps(value)  # string escapes as GraphQL reads them (a lone one: refused)
    if isinstance(value, list):
        items = [literal(item) for item in value]
        written = [item for item in items if item is not None]
        return "[" + ", ".join(written) + "]" if len(written) == len(items) else None
    if isinstance(value, dict):
        if not all(isinstance(k, str) and k.isascii() and k.isidentifier() for k in value):
            return None  # a GraphQL object field is a name
        fields = {key: literal(item) for key, item in value.items()}
        if None in fields.values():
            return None
        return "{" + ", ".join(f"{key}: {text}" for key, text in fields.items()) + "}"
    return None


def place(target: Target, leaf: str) -> str:
    """The argument's value with `leaf` where the target's value goes."""
    text = leaf
    type_stack: list[GraphQLInputType] = []
    current: GraphQLInputType = target.path[-1].args[target.argument].type
    for step in target.inside:
        type_stack.append(current)
        inner = current.of_type if isinstance(current, GraphQLNonNull) else current
        if step == "[]":
            assert isinstance(inner, GraphQLList)
            current = inner.of_type
        else:
            assert isinstance(inner, GraphQLInputObjectType)
            current = inner.fields[step.lstrip(".")].type
    for step, outer in zip(reversed(target.inside), reversed(type_stack), strict=True):
        inner = outer.of_type if isinstance(outer, GraphQLNonNull) else outer
        if step == "[]":
            text = "[" + text + "]"
        else:
            assert isinstance(inner, GraphQLInputObjectType)
            others = required(inner.fields, skip=step.lstrip("."))
            text = "{" + ", ".join(p for p in (f"{step.lstrip('.')}: {text}", others) if p) + "}"
    return text


def document(target: Target, value: object, as_variable: bool) -> str | None:
    """The operation that sends `value` to the target, or None (no literal for it)."""
    if as_variable:
        leaf = "$v"
    else:
        written = literal(value)
        if written is None:
            return None
        leaf = written
    inner = "__typename"
    for depth in range(len(target.path) - 1, -1, -1):
        field, name = target.path[depth], target.names[depth]
        if depth == len(target.path) - 1:
            arguments = ", ".join(
                p
                for p in (
                    f"{target.argument}: {place(target, leaf)}",
                    required(field.args, skip=target.argument),
                )
                if p
            )
        else:
            arguments = required(field.args)
        selection = "" if isinstance(get_named_type(field.type), GraphQLScalarType) else inner
        call = f"{name}({arguments})" if arguments else name
        inner = f"{call} {{ {selection} }}" if selection else call
    variables = f"($v: {target.leaf})" if as_variable else ""
    return f"{target.operation} {variables} {{ {inner} }}"


def deep(levels: int) -> object:
    value: object = "bottom"
    for _ in range(levels):
        value = [value]
    return value


TEXT_VALUES: list[object] = ["a\x00b", "\x00", "\ud800", "a\udfffb", "x" * 10**6]
NUMBER_VALUES: list[object] = [10**19, -1, -(2**31), 2**63]
JSON_VALUES: list[object] = [
    "a\x00b",
    {"k\x00": 1},
    {"k": "\ud800"},
    [1, "\udc00"],
    10**19,
    -1,
    deep(100),
    {"s": "x" * 10**6},
]


def hostile_values(target: Target) -> list[object]:
    name = target.leaf_name
    if name in ("String", "ID"):
        return TEXT_VALUES
    if name in ("Int", "Float", "Boolean"):
        return NUMBER_VALUES
    return JSON_VALUES


def legitimately_accepted(target: Target, value: object) -> bool:
    """The only values a hostile sweep may see accepted (see the module docstring)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if target.leaf_name not in ("Int", "Float"):
        return target.leaf_name not in ("String", "ID", "Boolean")  # a JSON number is data
    rule = RULES.get(target.rule_name)
    if rule is None or rule.low is None or rule.high is None:
        return True
    above = rule.low < value if rule.low_open else rule.low <= value
    return above and value <= rule.high


async def row_counts(admin: asyncpg.Connection) -> dict[str, int]:
    count = "SELECT count(*) FROM laneway.{}"  # TABLES are this module's constants
    return {t: await admin.fetchval(count.format(t)) for t in TABLES}


def check_errors(errors: list[dict[str, Any]], where: str) -> None:
    for error in errors:
        assert error.get("message") != "Unexpected error.", where
        extensions = error.get("extensions") or {}
        assert "requestId" not in extensions, where
        assert extensions.get("code") != "INTERNAL_SERVER_ERROR", where


async def over_http(server: LiveServer, query: str, variables: dict[str, Any]) -> bool:
    """Send one operation; True when it was accepted (data and no errors)."""
    body = json.dumps({"query": query, "variables": variables}).encode()
    response = await server.client.post(
        "/graphql", content=body, headers={"content-type": "application/json"}
    )
    where = f"{query[:300]} {str(variables)[:200]}: {response.status_code} {response.text[:500]}"
    assert response.status_code < 500, where
    for word in FORBIDDEN_TEXT:
        assert word not in response.text, where
    if response.status_code != 200:
        assert 400 <= response.status_code < 500, where  # e.g. the body's own JSON limits
        return False
    result = response.json()
    check_errors(result.get("errors") or [], where)
    return not result.get("errors")


async def over_websocket(server: LiveServer, query: str, variables: dict[str, Any]) -> bool:
    """Subscribe once; True when the first answer is an event (`next` without errors)."""
    frame = {"id": "h", "type": "subscribe", "payload": {"query": query, "variables": variables}}
    async with connect(server.ws_url, subprotocols=[PROTOCOL]) as ws:  # type: ignore[list-item]
        await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        await ws.send(json.dumps(frame))
        close_code = None
        try:
            async with asyncio.timeout(10):  # every current subscription answers at once
                reply = json.loads(await ws.recv())
        except ConnectionClosed as closed:
            close_code = closed.rcvd.code if closed.rcvd is not None else None
    if close_code is not None:
        # graphql-transport-ws answers a document that does not parse by closing: 4400.
        assert close_code == 4400, f"{query[:300]}: closed with {close_code}"
        return False
    where = f"{query[:300]}: {str(reply)[:500]}"
    assert reply["type"] in ("next", "error"), where
    if reply["type"] == "error":
        check_errors(reply["payload"], where)
        return False
    check_errors(reply["payload"].get("errors") or [], where)
    return not reply["payload"].get("errors")


async def send(
    server: LiveServer, admin: asyncpg.Connection, target: Target, value: object, as_variable: bool
) -> None:
    """Send `value` to `target` and judge the answer (see the module docstring)."""
    query = document(target, value, as_variable)
    if query is None:
        return
    variables = {"v": value} if as_variable else {}
    before = await row_counts(admin)
    if target.operation == "subscription":
        if isinstance(value, str) and len(value) > WS_LONG:
            value = value[:WS_LONG]
            variables = {"v": value} if as_variable else {}
            query = document(target, value, as_variable)
            assert query is not None
        accepted = await over_websocket(server, query, variables)
    else:
        accepted = await over_http(server, query, variables)
    if accepted:
        assert legitimately_accepted(target, value), f"{target.id} accepted {str(value)[:80]}"
    else:
        assert await row_counts(admin) == before, f"{target.id} refused {value!r:.80} but wrote"


@pytest.fixture
async def api_server(database_url: str) -> AsyncIterator[LiveServer]:
    """API only: no engine in the background, so rows change only by what a request wrote."""
    async with live_server(make_settings(database_url, engine_enabled=False)) as live:
        await live.graphql('mutation { enqueueWorkflow(name: "noop") { instanceID } }')
        yield live


def test_the_sweep_covers_every_argument_of_the_schema() -> None:
    graphql_schema = schema._schema
    covered = {(t.names[-1], t.argument) for t in TARGETS}
    for root in (
        graphql_schema.query_type,
        graphql_schema.mutation_type,
        graphql_schema.subscription_type,
    ):
        assert root is not None
        for name, field in root.fields.items():
            assert {(name, argument) for argument in field.args} <= covered
    assert ("events", "limit") in covered  # a nested field's argument
    assert ("workflowInstances", "statuses") in covered  # a list argument
    assert ("enqueueWorkflow", "params") in covered  # a JSON argument


async def test_every_argument_survives_every_hostile_value(
    api_server: LiveServer, admin: asyncpg.Connection
) -> None:
    sent = 0
    for target in TARGETS:
        for value in hostile_values(target):
            for as_variable in (True, False):
                await send(api_server, admin, target, value, as_variable)
                sent += 1
    assert sent >= 2 * len(TARGETS) * len(NUMBER_VALUES)


BAD_CHARACTERS = st.sampled_from(["\x00", "\ud800", "\udbff", "\udc00", "\udfff"])
HOSTILE_TEXT = st.builds(
    lambda before, bad, after: before + bad + after,
    st.text(max_size=8),
    BAD_CHARACTERS,
    st.text(max_size=8),
)
HOSTILE_NUMBERS = st.integers(min_value=2**63, max_value=10**30) | st.integers(
    min_value=-(10**20), max_value=-1
)
HOSTILE_JSON = (
    HOSTILE_TEXT
    | st.builds(deep, st.integers(min_value=65, max_value=190))
    | st.dictionaries(HOSTILE_TEXT, st.integers(), min_size=1, max_size=2)
)


def hostile_for(target: Target) -> st.SearchStrategy[object]:
    name = target.leaf_name
    if name in ("String", "ID"):
        return HOSTILE_TEXT
    if name in ("Int", "Float", "Boolean"):
        return HOSTILE_NUMBERS
    return HOSTILE_JSON


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
async def test_generated_hostile_values_are_refused_or_harmless(
    api_server: LiveServer, admin: asyncpg.Connection, data: st.DataObject
) -> None:
    target = data.draw(st.sampled_from(TARGETS), label="target")
    value = data.draw(hostile_for(target), label="value")
    as_variable = data.draw(st.booleans(), label="as_variable")
    await send(api_server, admin, target, value, as_variable)
