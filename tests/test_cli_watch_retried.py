"""`laneway watch --instance` of an instance that a retry ran again after it failed, both ways
(the database, and --url): the replay shows the whole history, the failure the retry superseded
included, and the watch ends with the instance's actual end.

A module of its own: test_cli_remote imports test_cli_watch, so test_cli_watch cannot import
cli_ways (which imports test_cli_remote).
"""

import json
import re

from laneway.engine import Done, HandlerContext, RetryPolicy, Workflow
from laneway.model import JSONValue, Status
from laneway.store import Store
from tests.cli_ways import both_ways, ways
from tests.engine.helpers import make_engine, until_status

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
