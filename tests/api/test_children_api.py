"""The parentID filter over a real server: the children of an instance listed by
workflowInstancesConnection and cancelled in bulk; BAD_USER_INPUT for a parentID that is not a
UUID, as for any malformed instance id. (workflowInstances keeps the seed contract's arguments:
tests/test_schema_file.py.)"""

from collections.abc import AsyncIterator

import asyncpg
import pytest

from tests.api.conftest import LiveServer, live_server, make_settings

ENQUEUE = 'mutation { enqueueWorkflow(name: "noop") { instanceID } }'
CONNECTION = """
query ($parent: ID) {
  workflowInstancesConnection(parentID: $parent) { edges { node { instanceID parentID } } }
}"""
BULK = """
mutation Bulk($filter: InstanceFilter!, $dryRun: Boolean) {
  cancelWorkflows(filter: $filter, dryRun: $dryRun) { matched changed sampleIDs }
}"""
STATUSES = "SELECT instance_id::text, status FROM laneway.instances"


@pytest.fixture
async def idle(database_url: str) -> AsyncIterator[LiveServer]:
    """A server whose engine does not run: instances stay as the test puts them."""
    async with live_server(make_settings(database_url, engine_enabled=False)) as server:
        yield server


async def _family(server: LiveServer, admin: asyncpg.Connection) -> tuple[str, list[str], str]:
    """A parent, its three children (newest first) and an instance of no parent."""
    ids = []
    for _ in range(5):
        body = await server.graphql(ENQUEUE)
        ids.append(body["data"]["enqueueWorkflow"]["instanceID"])
    parent, *children, stranger = ids
    await admin.execute(
        "UPDATE laneway.instances SET parent_id = $1 WHERE instance_id = ANY($2::uuid[])",
        parent,
        children,
    )
    return parent, list(reversed(children)), stranger


async def test_the_children_of_an_instance_are_listed_by_parent_id(
    idle: LiveServer, admin: asyncpg.Connection
) -> None:
    parent, children, _ = await _family(idle, admin)
    paged = await idle.graphql(CONNECTION, parent=parent)
    nodes = [edge["node"] for edge in paged["data"]["workflowInstancesConnection"]["edges"]]
    assert nodes == [{"instanceID": child, "parentID": parent} for child in children]
    childless = await idle.graphql(CONNECTION, parent=children[0])
    assert childless["data"]["workflowInstancesConnection"]["edges"] == []
    everyone = await idle.graphql(CONNECTION, parent=None)  # null: any parent, or none
    assert len(everyone["data"]["workflowInstancesConnection"]["edges"]) == 5


async def test_a_bulk_cancel_by_parent_id_cancels_the_children_alone(
    idle: LiveServer, admin: asyncpg.Connection
) -> None:
    parent, children, stranger = await _family(idle, admin)
    dry = await idle.graphql(BULK, filter={"parentID": parent}, dryRun=True)
    assert dry["data"]["cancelWorkflows"] == {"matched": 3, "changed": 0, "sampleIDs": children}
    assert {row["status"] for row in await admin.fetch(STATUSES)} == {"pending"}
    real = await idle.graphql(BULK, filter={"parentID": parent, "statuses": ["pending"]})
    assert real["data"]["cancelWorkflows"] == {"matched": 3, "changed": 3, "sampleIDs": children}
    statuses = {row[0]: row[1] for row in await admin.fetch(STATUSES)}
    assert statuses == {
        parent: "pending",
        stranger: "pending",
        **{child: "cancelled" for child in children},
    }


@pytest.mark.parametrize(
    ("query", "argument"),
    [
        (CONNECTION, '"parentID" of workflowInstancesConnection'),
        (
            BULK.replace("$filter: InstanceFilter!", "$parent: ID").replace(
                "filter: $filter", "filter: {parentID: $parent}"
            ),
            '"filter.parentID" of cancelWorkflows',
        ),
    ],
)
async def test_a_parent_id_that_is_not_a_uuid_is_bad_user_input_as_any_instance_id(
    idle: LiveServer, admin: asyncpg.Connection, query: str, argument: str
) -> None:
    await _family(idle, admin)
    malformed = await idle.graphql(
        "query ($id: ID!) { workflowInstance(instanceID: $id) { name } }", id="nope"
    )
    [instance_error] = malformed["errors"]
    assert instance_error["extensions"]["code"] == "BAD_USER_INPUT"
    assert instance_error["message"] == (
        'argument "instanceID" of workflowInstance is invalid: instanceID must be a UUID'
    )
    body = await idle.graphql(query, parent="nope")
    assert body.get("data") is None, body
    [error] = body["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert error["message"] == f"argument {argument} is invalid: parentID must be a UUID"
    assert {row["status"] for row in await admin.fetch(STATUSES)} == {"pending"}
