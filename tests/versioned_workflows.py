"""One workflow, `deploy_demo`, in two versions, for the tests of versions side by side: a
worker process loads `tests.versioned_workflows:v1` code or `v2` code through
LANEWAY_WORKFLOWS (the modules tests.versioned_v1 and tests.versioned_v2 below re-export one
each). Both wait for the signal `go` after their first step, so an instance can be held in
flight across a deploy; each step reports the version of the code that ran it and the pid."""

import os

from laneway import Done, HandlerContext, Next, WaitForSignal, Workflow
from laneway.model import JSONValue


def deploy_demo(version: str) -> Workflow:
    async def start(ctx: HandlerContext, params: JSONValue) -> Next | WaitForSignal:
        ctx.state["started_on"] = version
        return WaitForSignal("go", timeout_seconds=None, then="finish")

    async def finish(ctx: HandlerContext, params: JSONValue) -> Done:
        return Done(
            {"started_on": ctx.state["started_on"], "finished_on": version, "pid": os.getpid()}
        )

    return Workflow(
        name="deploy_demo",
        version=version,
        handlers={"start": start, "finish": finish},
        initial="start",
    )
