"""The `queueHistory` query over a real uvicorn server (issue #18, point 5): one sample per
minute, oldest first, zeros where idle; NOT_FOUND for an unknown queue, BAD_USER_INPUT for
minutes out of range.

A past minute's activity is written as events with chosen `at` stamps, then rolled up.
"""

import itertools
from datetime import datetime

import asyncpg

from laneway.store import open_store
from tests.api.conftest import LiveServer

HISTORY = """query ($name: String!, $minutes: Int) {
  queueHistory(name: $name, minutes: $minutes) {
    at started completed failed retried pending
  }
}"""


async def _past_activity(database_url: str, instance_id: str) -> datetime:
    """Two starts, a retry and a completion three minutes ago, rolled up; returns the minute."""
    conn = await asyncpg.connect(database_url)
    try:
        minute: datetime = await conn.fetchval(
            "SELECT date_trunc('minute', now()) - interval '3 minutes'"
        )
        for offset, (kind, error) in enumerate(
            [("started", None), ("retrying", "boom"), ("started", None), ("completed", None)]
        ):
            await conn.execute(
                """INSERT INTO laneway.events (instance_id, name, type, status, at, error)
                   VALUES ($1::uuid, 'noop', $2, 'pending',
                           $3::timestamptz + $4::integer * interval '1 second', $5)""",
                instance_id,
                kind,
                minute,
                offset,
                error,
            )
    finally:
        await conn.close()
    async with open_store(database_url, pool_size=1) as store:
        await store.roll_up_queue_history()
    return minute


async def test_queue_history_answers_every_minute_oldest_first(
    server: LiveServer, database_url: str
) -> None:
    enqueued = await server.graphql('mutation { enqueueWorkflow(name: "noop") { instanceID } }')
    minute = await _past_activity(database_url, enqueued["data"]["enqueueWorkflow"]["instanceID"])

    body = await server.graphql(HISTORY, name="noop", minutes=5)
    assert "errors" not in body, body
    samples = body["data"]["queueHistory"]
    assert len(samples) == 5
    assert set(samples[0]) == {"at", "started", "completed", "failed", "retried", "pending"}
    ats = [s["at"] for s in samples]
    assert all(b - a == 60_000 for a, b in itertools.pairwise(ats))  # one per minute, in order
    busy = [s for s in samples if s["at"] == minute.timestamp() * 1000]
    assert busy == [
        {
            "at": minute.timestamp() * 1000,
            "started": 2,
            "completed": 1,
            "failed": 0,
            "retried": 1,
            "pending": 0,
        }
    ]
    others = [s for s in samples if s not in busy]
    assert all(s["started"] == s["completed"] == s["failed"] == s["retried"] == 0 for s in others)

    default = await server.graphql(HISTORY, name="noop")  # minutes omitted: 60
    assert len(default["data"]["queueHistory"]) == 60
    null = await server.graphql(HISTORY, name="noop", minutes=None)
    assert len(null["data"]["queueHistory"]) == 60
    day = await server.graphql(HISTORY, name="noop", minutes=1440)
    assert len(day["data"]["queueHistory"]) == 1440


async def test_an_unknown_queue_is_not_found(server: LiveServer) -> None:
    body = await server.graphql(HISTORY, name="no_such_queue", minutes=5)
    assert body["data"] is None
    assert body["errors"][0]["extensions"]["code"] == "NOT_FOUND"
    assert body["errors"][0]["path"] == ["queueHistory"]


async def test_minutes_out_of_range_are_bad_user_input(server: LiveServer) -> None:
    for minutes in (0, -1, 1441, 2**31 - 1):
        body = await server.graphql(HISTORY, name="noop", minutes=minutes)
        assert body.get("data") is None, body
        error = body["errors"][0]
        assert error["extensions"]["code"] == "BAD_USER_INPUT", body
        assert "minutes" in error["message"]
    literal = await server.graphql('{ queueHistory(name: "noop", minutes: 0) { at } }')
    assert literal["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
