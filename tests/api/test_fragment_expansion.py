"""A document whose fragments expand past a limit is refused without expanding them
(laneway/api/graphql/fragment_expansion.py).

Found by an outside audit: Strawberry's depth and alias limiters expand a fragment spread
anew wherever it is spread, so a document whose fragments each spread the next twice (778
characters, 20 fragments, within the token limit) kept validation busy for seconds, and each
more fragment doubled that, before any limit refused it.
"""

from collections.abc import AsyncIterator

import pytest
from graphql import parse

from laneway.api.graphql.fragment_expansion import MAX_EXPANDED_FIELDS, expanded_fields
from tests.api.conftest import LiveServer, live_server, make_settings


def doubling(fragments: int) -> str:
    """`{ ...F0 }` with F0 spreading F1 twice, F1 F2 twice, ...: 2**fragments fields."""
    chain = " ".join(
        f"fragment F{i} on Query {{ ...F{i + 1} ...F{i + 1} }}" for i in range(fragments)
    )
    return f"{{ ...F0 }} {chain} fragment F{fragments} on Query {{ __typename }}"


@pytest.fixture
async def server(database_url: str) -> AsyncIterator[LiveServer]:
    async with live_server(make_settings(database_url, engine_enabled=False)) as live:
        yield live


def test_the_expansion_is_counted_without_expanding() -> None:
    assert expanded_fields(parse(doubling(3))) == 8
    assert expanded_fields(parse(doubling(200))) == 2**200  # counted, never walked
    # Fields inside fields and inline fragments count; a cycle counts nothing more.
    nested = parse(
        "{ queues { name ... on QueueStats { name } ...Q } } fragment Q on QueueStats { name }"
    )
    assert expanded_fields(nested) == 4
    cycle = parse("{ ...A } fragment A on Query { __typename ...B } fragment B on Query { ...A }")
    assert expanded_fields(cycle) == 1


async def test_a_doubling_chain_of_fragments_is_refused_at_once(server: LiveServer) -> None:
    document = doubling(40)  # 2**40 fields: days of the limiters' expansion
    assert len(document) < 2000
    body = await server.graphql(document)
    assert body.get("data") is None
    errors = body["errors"]
    assert {error["extensions"]["code"] for error in errors} == {"GRAPHQL_VALIDATION_FAILED"}
    assert errors[0]["message"] == (
        f"The document expands to {2**40:,} fields through its fragments, over the maximum"
        f" of {MAX_EXPANDED_FIELDS:,}."
    )  # (and, at that size, the result-size estimate says it is too large too)
    # Within the limit, the same shape is answered as before.
    small = await server.graphql(doubling(5))
    assert small == {"data": {"__typename": "Query"}}
