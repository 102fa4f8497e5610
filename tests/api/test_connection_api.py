"""`workflowInstancesConnection` over a real uvicorn server (issue #21, point 4): edges with
cursors, pageInfo, the endCursor of one page as the next page's `after`, the filters of
`workflowInstances` (and the same order), a concurrency key and a version; BAD_USER_INPUT for
a cursor the server did not make and for `first` out of 1..500.

The engine is off and the rows are seeded with SQL, so no status changes under the pages.
"""

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from tests.api.conftest import LiveServer, live_server, make_settings

CONNECTION = """
query ($first: Int, $after: String, $name: String, $queue: String, $status: String,
       $statuses: [String!], $key: String, $version: String) {
  workflowInstancesConnection(first: $first, after: $after, name: $name, queue: $queue,
                              status: $status, statuses: $statuses, concurrencyKey: $key,
                              version: $version) {
    edges { cursor node { instanceID name queue status concurrencyKey version createdAt } }
    pageInfo { hasNextPage endCursor hasPreviousPage startCursor }
  }
}"""
LIST = """
query ($name: String, $queue: String, $status: String, $statuses: [String!]) {
  workflowInstances(name: $name, queue: $queue, status: $status, statuses: $statuses,
                    limit: 500) { instanceID }
}"""
# 60 rows, two per creation time; $1 the newest creation time.
SEED = """
INSERT INTO laneway.instances (instance_id, name, queue, status, concurrency_key, version,
                               created_at, updated_at)
SELECT gen_random_uuid(), (ARRAY['hello', 'countdown', 'flaky'])[1 + g % 3],
       (ARRAY['default', 'other'])[1 + g % 2],
       (ARRAY['pending', 'completed', 'failed', 'paused'])[1 + g % 4],
       CASE WHEN g % 5 = 0 THEN 'tenant-a' END, CASE WHEN g % 7 = 0 THEN '2' ELSE '1' END,
       $1::timestamptz - (g / 2) * interval '1 second', $1::timestamptz
  FROM generate_series(1, 60) AS g
"""
EVERY_ID = "SELECT instance_id FROM laneway.instances ORDER BY created_at DESC, instance_id DESC"


@pytest.fixture
async def server(database_url: str, admin: asyncpg.Connection) -> AsyncIterator[LiveServer]:
    await admin.execute(SEED, await admin.fetchval("SELECT now()"))
    async with live_server(make_settings(database_url, engine_enabled=False)) as live:
        yield live


async def page(server: LiveServer, **variables: Any) -> dict[str, Any]:
    body = await server.graphql(CONNECTION, **variables)
    assert "errors" not in body, body
    connection: dict[str, Any] = body["data"]["workflowInstancesConnection"]
    return connection


async def walk(server: LiveServer, first: int, **filters: Any) -> list[str]:
    """Every page's node ids, following endCursor; each edge's cursor leads on from it."""
    ids: list[str] = []
    after = None
    while True:
        connection = await page(server, first=first, after=after, **filters)
        edges, info = connection["edges"], connection["pageInfo"]
        ids.extend(edge["node"]["instanceID"] for edge in edges)
        assert info["endCursor"] == (edges[-1]["cursor"] if edges else None)
        # Relay's PageInfo whole: a page read forward (first/after) says no previous page, as
        # the Relay specification allows and graphql-relay does.
        assert info["startCursor"] == (edges[0]["cursor"] if edges else None)
        assert info["hasPreviousPage"] is False
        if not info["hasNextPage"]:
            return ids
        assert len(edges) == first
        after = info["endCursor"]


async def test_pages_follow_end_cursors_newest_first(
    server: LiveServer, admin: asyncpg.Connection
) -> None:
    every = [str(r["instance_id"]) for r in await admin.fetch(EVERY_ID)]
    first = await page(server, first=25)
    assert [e["node"]["instanceID"] for e in first["edges"]] == every[:25]
    assert first["pageInfo"]["hasNextPage"] is True
    second = await page(server, first=25, after=first["pageInfo"]["endCursor"])
    assert [e["node"]["instanceID"] for e in second["edges"]] == every[25:50]
    # Any edge's cursor is a place to start from, not only the page's end.
    middle = first["edges"][9]["cursor"]
    from_middle = await page(server, first=3, after=middle)
    assert [e["node"]["instanceID"] for e in from_middle["edges"]] == every[10:13]
    last = await page(server, first=25, after=second["pageInfo"]["endCursor"])
    assert len(last["edges"]) == 10
    assert last["pageInfo"]["hasNextPage"] is False
    past = await page(server, after=last["pageInfo"]["endCursor"])
    assert past == {
        "edges": [],
        "pageInfo": {
            "hasNextPage": False,
            "endCursor": None,
            "hasPreviousPage": False,
            "startCursor": None,
        },
    }
    created = [e["node"]["createdAt"] for e in first["edges"]]
    assert created == sorted(created, reverse=True)
    assert len((await page(server))["edges"]) == 50  # first defaults to 50
    assert len((await page(server, first=None))["edges"]) == 50


@pytest.mark.parametrize(
    "filters",
    [
        {},
        {"name": "hello"},
        {"queue": "other"},
        {"status": "failed"},
        {"statuses": ["pending", "paused"]},
        {"status": "paused", "statuses": ["pending", "paused"]},
        {"status": "failed", "statuses": ["pending"]},
        {"name": "countdown", "queue": "default", "statuses": ["completed", "failed"]},
        {"name": "nothing-by-this-name"},
    ],
)
async def test_the_filters_are_those_of_workflow_instances(
    server: LiveServer, filters: dict[str, Any]
) -> None:
    listed = await server.graphql(LIST, **filters)
    assert "errors" not in listed, listed
    expected = [row["instanceID"] for row in listed["data"]["workflowInstances"]]
    assert await walk(server, 4, **filters) == expected


async def test_a_concurrency_key_and_a_version_filter_too(
    server: LiveServer, admin: asyncpg.Connection
) -> None:
    keyed = await admin.fetch(
        "SELECT instance_id FROM laneway.instances WHERE concurrency_key = 'tenant-a'"
        " ORDER BY created_at DESC, instance_id DESC"
    )
    expected = [str(r["instance_id"]) for r in keyed]
    assert expected  # the seed has some
    assert await walk(server, 5, key="tenant-a") == expected
    nodes = [e["node"] for e in (await page(server, version="2", first=500))["edges"]]
    assert {n["version"] for n in nodes} == {"2"}
    assert len(nodes) == await admin.fetchval(
        "SELECT count(*) FROM laneway.instances WHERE version = '2'"
    )


async def _refused(server: LiveServer, **variables: Any) -> dict[str, Any]:
    body = await server.graphql(CONNECTION, **variables)
    assert body.get("data") is None, body
    error: dict[str, Any] = body["errors"][0]
    assert error["extensions"]["code"] == "BAD_USER_INPUT", body
    return error


async def test_a_cursor_the_server_did_not_make_is_bad_user_input(server: LiveServer) -> None:
    good = (await page(server, first=1))["pageInfo"]["endCursor"]
    for bad in ("", "nope", good[:-1], good + "AAAA", "%" * 34):
        error = await _refused(server, after=bad)
        assert "after is not a cursor" in error["message"]
    # Far too long to be one: the argument guard refuses it before any parsing.
    error = await _refused(server, after="A" * 65)
    assert "after" in error["message"]
    literal = await server.graphql(
        '{ workflowInstancesConnection(after: "x") { edges { cursor } } }'
    )
    assert literal["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"


async def test_first_out_of_range_is_bad_user_input(server: LiveServer) -> None:
    for first in (0, -1, 501, 2**31 - 1):
        error = await _refused(server, first=first)
        assert "first" in error["message"]
    literal = await server.graphql(
        "{ workflowInstancesConnection(first: 0) { pageInfo { hasNextPage } } }"
    )
    assert literal["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert len((await page(server, first=500))["edges"]) == 60


async def test_a_bad_status_is_bad_user_input(server: LiveServer) -> None:
    error = await _refused(server, status="sleeping")
    assert error["message"].startswith("status must be one of")
    assert error["message"].endswith('got "sleeping"')
    listed = await _refused(server, statuses=["running", "x" * 100])
    assert listed["message"].startswith("each of statuses must be one of")
    assert listed["message"].endswith(f'got "{"x" * 40}…"')  # capped
