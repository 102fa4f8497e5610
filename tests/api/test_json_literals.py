"""JSON literals in a document (laneway/api/graphql/json_literal.py): a GraphQL value read as
the JSON value it stands for, variables where they stand, through the real schema.

A variable the request does not provide (and that has no default) stands for nothing: inside
an object its key is left out, inside a list it is null, as graphql-core's replace_variables
reads the GraphQL spec for a scalar's literal.
"""

from typing import Any

import pytest
from graphql import parse_value
from strawberry.schema.config import StrawberryConfig

from laneway import Services
from laneway.api import (
    BearerTokens,
    LanewayContext,
    LanewayMutation,
    LanewayQuery,
    LanewaySchema,
    schema_extensions,
)
from laneway.api.graphql.json_literal import json_literal
from tests.api.conftest import Execute


def enqueued(params_literal: str, variables: str) -> str:
    definitions = f"({variables})" if variables else ""
    return (
        f'mutation {definitions} {{ enqueueWorkflow(name: "noop", params: {params_literal}) '
        "{ instance { params } } }"
    )


BOTH = "{a: $x, b: [$x]}"  # the variable as a key's value and as a list's item
SENT = {"k": [1]}
# (case, params literal, variable definitions, variables sent, params stored)
UNSET: list[tuple[str, str, str, dict[str, Any], Any]] = [
    ("a key whose variable is unset", "{a: $x, b: 1}", "$x: JSON", {}, {"b": 1}),
    ("an item whose variable is unset", "{a: [$x, 2]}", "$x: String", {}, {"a": [None, 2]}),
    ("a nested key", "{a: {c: $x}, b: [{d: $x}]}", "$x: JSON", {}, {"a": {}, "b": [{}]}),
    ("either, unset", BOTH, "$x: JSON", {}, {"b": [None]}),
    ("a variable sent as null", BOTH, "$x: JSON", {"x": None}, {"a": None, "b": [None]}),
    ("a variable sent", BOTH, "$x: JSON", {"x": SENT}, {"a": SENT, "b": [SENT]}),
    ("an unset variable's default", BOTH, "$x: JSON = {k: [1]}", {}, {"a": SENT, "b": [SENT]}),
]


@pytest.mark.parametrize(
    ("literal", "definitions", "variables", "stored"),
    [case[1:] for case in UNSET],
    ids=[case[0] for case in UNSET],
)
async def test_an_unset_variable_in_a_json_literal_stands_for_nothing(
    run: Execute, literal: str, definitions: str, variables: dict[str, Any], stored: Any
) -> None:
    result = await run(enqueued(literal, definitions), **variables)
    assert result.errors is None, result.errors
    assert result.data is not None
    assert result.data["enqueueWorkflow"]["instance"]["params"] == stored


async def test_an_unset_variable_in_a_json_literal_of_a_batch_is_left_out(run: Execute) -> None:
    query = (
        "mutation ($x: JSON) { enqueueWorkflows(requests: "
        '[{name: "noop", params: {a: $x, b: [$x]}}]) { instance { params } } }'
    )
    result = await run(query)
    assert result.errors is None, result.errors
    assert result.data is not None
    assert result.data["enqueueWorkflows"][0]["instance"]["params"] == {"b": [None]}


async def test_a_json_number_literal_keeps_its_value_and_a_zero_is_taken_in_any_notation(
    run: Execute,
) -> None:
    # The input guard refuses a number that a float cannot hold (test_input_guard.py).
    result = await run(enqueued("{z: 0e400, n: -0.0, e: 0.000e-999, t: 1e-300, s: 5e-324}", ""))
    assert result.errors is None, result.errors
    assert result.data is not None
    stored = {"z": 0.0, "n": 0.0, "e": 0.0, "t": 1e-300, "s": 5e-324}
    assert result.data["enqueueWorkflow"]["instance"]["params"] == stored


def test_a_json_literal_without_variables_is_its_json_value() -> None:
    node = parse_value('{s: "t", i: 3, f: 1.5, b: true, n: null, e: ENUM, l: [1, {m: []}]}')
    assert json_literal(node, None) == {
        "s": "t",
        "i": 3,
        "f": 1.5,
        "b": True,
        "n": None,
        "e": "ENUM",
        "l": [1, {"m": []}],
    }


@pytest.mark.parametrize(
    "config",
    [None, StrawberryConfig(auto_camel_case=True)],
    ids=["no config", "a host's own config"],
)
async def test_a_hosts_own_schema_reads_json_literals_as_laneways_does(
    services: Services, config: StrawberryConfig | None
) -> None:
    """A host's LanewaySchema built without schema_config() (or with a config of its own)
    used Strawberry's JSON scalar: an unset variable in a params literal failed the enqueue
    with "Object of type UndefinedType is not JSON serializable"."""
    host_schema = LanewaySchema(
        query=LanewayQuery,
        mutation=LanewayMutation,
        config=config,
        extensions=schema_extensions(),
    )
    context = LanewayContext(
        services=services, permission=BearerTokens.from_settings(services.settings)
    )
    result = await host_schema.execute(enqueued("{a: $x, b: 1}", "$x: JSON"), context_value=context)
    assert result.errors is None, result.errors
    assert result.data is not None
    assert result.data["enqueueWorkflow"]["instance"]["params"] == {"b": 1}
