"""A document whose fragments expand past a limit is refused without expanding them, and one
whose fields of one response name take too long to compare is refused within a budget
(laneway/api/graphql/fragment_expansion.py).

Found by an outside audit: Strawberry's depth and alias limiters expand a fragment spread
anew wherever it is spread, so a document whose fragments each spread the next twice (778
characters, 20 fragments, within the token limit) kept validation busy for seconds, and each
more fragment doubled that, before any limit refused it.
"""

from collections.abc import AsyncIterator

import pytest
from graphql import parse

from laneway.api.graphql.documents import MAX_DOCUMENT_CHARS
from laneway.api.graphql.fragment_expansion import (
    MAX_EXPANDED_FIELDS,
    MAX_MERGE_WORK,
    expanded_fields,
)
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


MERGE_REFUSAL = (
    "The document takes too much work to validate: its fields that share a response name need"
    f" over {MAX_MERGE_WORK:,} comparisons to check that they can be merged. Select each field"
    " once in a selection set, and spread each fragment once."
)


@pytest.mark.parametrize("copies", [300, 1900])
async def test_many_copies_of_one_field_are_refused_within_the_merge_budget(
    server: LiveServer, copies: int
) -> None:
    """Found by an outside audit: ~1,900 copies of one field, each document made new by a
    comment, cost graphql-core's merge check a fifth of a second each, within the rate limit.
    300 copies (a cached document) were valid before and took its budget ~90,000 comparisons.
    """
    fields = " ".join(["instanceID"] * copies)
    document = f"# a new text\n{{ workflowInstances(limit: 1) {{ {fields} }} }}"
    assert (len(document) <= MAX_DOCUMENT_CHARS) == (copies == 300)  # both of Strawberry's paths
    body = await server.graphql(document)
    assert body.get("data") is None
    assert body["errors"] == [
        {"message": MERGE_REFUSAL, "extensions": {"code": "GRAPHQL_VALIDATION_FAILED"}}
    ]


async def test_fragments_that_repeat_fields_stay_within_the_merge_budget(
    server: LiveServer,
) -> None:
    # 40 fragments spread in one selection, each selecting the same fields: ~17,000 of it.
    fragments = " ".join(
        f"fragment F{i} on WorkflowInstanceStatus {{ instanceID status name"
        " events(limit: 2) { eventID type } }"
        for i in range(40)
    )
    spreads = " ".join(f"...F{i}" for i in range(40))
    body = await server.graphql(f"{{ workflowInstances(limit: 2) {{ {spreads} }} }} {fragments}")
    assert body == {"data": {"workflowInstances": []}}
