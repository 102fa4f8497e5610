"""`laneway watch --instance` of an instance that a retry ran again after it failed, both ways
(the database, and --url): the replay shows the whole history, the failure the retry superseded
included, and the watch ends with the instance's actual end.

A module of its own: test_cli_remote imports test_cli_watch, so test_cli_watch cannot import
cli_ways (which imports test_cli_remote).
"""

import asyncio
import json
import re
from typing import Any

import pytest

from laneway.cli import build_parser, commands
from laneway.config import Settings
from laneway.engine import Done, HandlerContext, RetryPolicy, Workflow
from laneway.model import JSONValue, Status
from laneway.store import Store
from tests.api.conftest import live_server, make_settings
from tests.cli_ways import both_ways, ways
from tests.engine.helpers import make_engine, until_status
from tests.test_cli_remote import url_of

EVENT_LINE = re.compile(r"\d\d:\d\d:\d\d\.\d{3}  (\w+)")


def failing_until_fixed(fixed: list[bool]) -> Workflow:
    """One attempt, which fails until `fixed[0]` is True (as code a deploy fixes would)."""

    async def run(ctx: HandlerContext, params: JSONValue) -> Done:
        if not fixed[0]:
            raise RuntimeError("not fixed yet")
        return Done({"fixed": True})

    return Workflow(
        "fixable", handlers={"run": run}, initial="run", retry=RetryPolicy(max_attempts=1)
    )


@both_ways
async def test_watch_exits_0_when_a_retry_completed_an_instance_that_had_failed(
    way: str, database_url: str, store: Store
) -> None:
    # The replay used to end at the first `failed` event, the one the retry superseded, and
    # exit 1 for an instance that completed.
    fixed = [False]
    engine = make_engine(store, failing_until_fixed(fixed), poll_interval_seconds=0.05)
    enqueued = await engine.enqueue("fixable", {})
    instance_id = str(enqueued.instance_id)
    async with engine.running():
        await until_status(store, enqueued.instance_id, Status.FAILED, timeout=30)
        fixed[0] = True
        await engine.retry(enqueued.instance_id)
        await until_status(store, enqueued.instance_id, Status.COMPLETED, timeout=30)
    async with ways(way, database_url) as run:
        code, out, err = await run("watch", "--instance", instance_id)
        assert code == 0, err
        types = [m.group(1) for line in out.splitlines() if (m := EVENT_LINE.match(line))]
        assert types[0] == "enqueued"
        assert types.count("failed") == 1  # the whole history, the superseded failure too
        assert types[-1] == "completed"
        code, out, err = await run("watch", "--instance", instance_id, "--json")
        assert code == 0, err
        types = [json.loads(line)["type"] for line in out.splitlines()]
        assert types.count("failed") == 1
        assert types[-1] == "completed"


async def test_watch_sees_a_retry_that_lands_after_it_began(
    database_url: str, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race: the watch of a failed instance begins, then a retry completes it before the
    replay reaches its `failed`. The newest event read at the start is the failure; the
    watch used to end there, exit 1, for an instance that completed."""
    fixed = [False]
    engine = make_engine(store, failing_until_fixed(fixed), poll_interval_seconds=0.05)
    enqueued = await engine.enqueue("fixable", {})
    async with engine.running():
        await until_status(store, enqueued.instance_id, Status.FAILED, timeout=30)
        fixed[0] = True
        reads = 0
        first_read = commands._last_event

        async def then_a_retry(client: Any, target: str) -> int | None:
            """Each read of the newest event as it was; right after the first, the retry."""
            nonlocal reads
            newest = await first_read(client, target)
            reads += 1
            if reads == 1:
                await engine.retry(enqueued.instance_id)
                await until_status(store, enqueued.instance_id, Status.COMPLETED, timeout=30)
            return newest

        monkeypatch.setattr(commands, "_last_event", then_a_retry)
        async with live_server(make_settings(database_url, engine_enabled=False)) as server:
            target = str(enqueued.instance_id)
            args = build_parser().parse_args(
                ["watch", "--instance", target, "--json", "--url", url_of(server)]
            )
            code = await asyncio.wait_for(commands.watch(args, Settings.from_env({})), 30)
    assert reads >= 2  # the start, and the `failed` the replay brought
    assert code == 0
