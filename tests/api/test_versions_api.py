"""Workflow versions and the deploy preflight over a real uvicorn server (issue #21): the
version of an instance, enqueueWorkflow(version:), the versions of workflows and workers, and
deployPreflight, with its errors."""

from typing import Any

from tests.api.conftest import LiveServer, live_server, make_settings, wait_until

ENQUEUE = """mutation ($version: String) {
  enqueueWorkflow(name: "deploy_demo", version: $version) { instanceID created }
}"""
STATUS = """query ($id: ID!) { workflowInstance(instanceID: $id) {
  version waitingReason { code message } } }"""
WAITING = "query ($id: ID!) { workflowInstance(instanceID: $id) { status } }"
PREFLIGHT = """query ($workflows: [WorkflowSpecInput!]!) {
  deployPreflight(workflows: $workflows) { name version reason detail count sampleIDs }
}"""
V1 = {"name": "deploy_demo", "version": "1", "actions": ["start", "finish"]}
V2 = {"name": "deploy_demo", "version": "2", "actions": ["start", "finish"]}


async def _enqueue(server: LiveServer, version: str | None = None) -> str:
    body = await server.graphql(ENQUEUE, version=version)
    assert "errors" not in body, body
    instance_id: str = body["data"]["enqueueWorkflow"]["instanceID"]
    return instance_id


async def _data(server: LiveServer, query: str, **variables: Any) -> dict[str, Any]:
    body = await server.graphql(query, **variables)
    assert "errors" not in body, body
    data: dict[str, Any] = body["data"]
    return data


async def test_versions_over_graphql(database_url: str) -> None:
    # The server has both versions of deploy_demo; its engine runs them both.
    settings = make_settings(
        database_url, workflow_modules=("tests.versioned_v1", "tests.versioned_v2")
    )
    async with live_server(settings) as server:
        newest, pinned = await _enqueue(server), await _enqueue(server, "1")
        assert (await _data(server, STATUS, id=newest))["workflowInstance"]["version"] == "2"
        assert (await _data(server, STATUS, id=pinned))["workflowInstance"]["version"] == "1"

        listed = await _data(server, "{ workflows { name version versions } }")
        assert {"name": "deploy_demo", "version": "2", "versions": ["2", "1"]} in listed[
            "workflows"
        ]

        async def registered() -> bool:
            workers = (await _data(server, "{ workers { versions { name version } } }"))["workers"]
            return bool(workers)

        await wait_until(registered)
        (worker,) = (await _data(server, "{ workers { versions { name version } } }"))["workers"]
        assert {"name": "deploy_demo", "version": "1"} in worker["versions"]
        assert {"name": "deploy_demo", "version": "2"} in worker["versions"]

        unknown = await server.graphql(ENQUEUE, version="3")
        assert unknown["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
        assert "no version '3'" in unknown["errors"][0]["message"]

        async def both_waiting() -> bool:
            for instance in (newest, pinned):
                found = await _data(server, WAITING, id=instance)
                if found["workflowInstance"]["status"] != "waiting":
                    return False
            return True

        # Both in flight (waiting for `go`, past `start`). Dropping v1 would strand the pinned one.
        await wait_until(both_waiting)
        assert (await _data(server, PREFLIGHT, workflows=[V1, V2]))["deployPreflight"] == []
        (finding,) = (await _data(server, PREFLIGHT, workflows=[V2]))["deployPreflight"]
        assert finding == {
            "name": "deploy_demo",
            "version": "1",
            "reason": "VERSION_GONE",
            "detail": "version '1' is not in the new code (it has '2')",
            "count": 1,
            "sampleIDs": [pinned],
        }
        renamed = {**V2, "actions": ["start", "complete"]}
        findings = (await _data(server, PREFLIGHT, workflows=[V1, renamed]))["deployPreflight"]
        assert [(f["version"], f["reason"]) for f in findings] == [("2", "ACTION_MISSING")]


async def test_preflight_refuses_bad_specs(database_url: str) -> None:
    settings = make_settings(database_url, workflow_modules=("tests.versioned_v1",))
    async with live_server(settings) as server:
        for specs, words in (
            ([V1, V1], "listed twice"),
            ([{**V1, "version": "1@2"}], "version"),
            ([{**V1, "actions": ["a b"]}], "action name"),
            ([{**V1, "version": "x" * 65}], "at most 64 characters"),
        ):
            body = await server.graphql(PREFLIGHT, workflows=specs)
            assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT", body
            assert words in body["errors"][0]["message"]


async def test_preflight_reads_a_templates_stages(database_url: str) -> None:
    # `stages` is optional (no `= null` default in the SDL, as the contract has it); given, a
    # paused template's next stage that is not among them is STAGE_MISSING.
    async with live_server(make_settings(database_url)) as server:
        body = await server.graphql(
            'mutation { enqueueWorkflow(name: "report", params: {review: true}) { instanceID } }'
        )
        instance_id = body["data"]["enqueueWorkflow"]["instanceID"]

        async def paused() -> bool:
            status = (await _data(server, WAITING, id=instance_id))["workflowInstance"]["status"]
            return bool(status == "paused")

        await wait_until(paused)
        stages = ["gather", "analyze", "generate"]
        spec = {"name": "report", "version": "1", "actions": stages}
        for given, findings in (
            ({}, []),
            ({"stages": stages}, []),
            ({"stages": ["gather", "generate"]}, ["STAGE_MISSING"]),
        ):
            found = (await _data(server, PREFLIGHT, workflows=[{**spec, **given}]))[
                "deployPreflight"
            ]
            assert [finding["reason"] for finding in found] == findings, given
