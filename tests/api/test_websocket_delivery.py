"""The direct websocket path of `workflowEvents` (laneway/api/websocket.py): which documents
take it, and that what it sends is exactly what Strawberry's own execution sends."""

import asyncio
from typing import Any

import pytest

from laneway.api.graphql.schema import schema
from laneway.api.websocket import EventRenderer
from tests.api.conftest import LiveServer, make_settings, running_services
from tests.api.test_websocket import api_only, collect, enqueue_hello  # noqa: F401 (fixture)

FIELDS = "eventID type instanceID name status at attempt error stage checkpoint __typename"
DIRECT = f"""subscription ($id: ID, $after: ID) {{
  workflowEvents(instanceID: $id, afterEventID: $after) {{ {FIELDS} }}
}}"""
# The same selection through a fragment: Strawberry executes it for each subscriber.
EXECUTED = f"""subscription ($id: ID, $after: ID) {{
  workflowEvents(instanceID: $id, afterEventID: $after) {{ ...all }}
}}
fragment all on WorkflowEvent {{ {FIELDS} }}"""


@pytest.mark.parametrize(
    ("document", "direct"),
    [
        (DIRECT, True),
        ("subscription { workflowEvents { type } }", True),
        ('subscription { e: workflowEvents(name: "hello") { id: eventID kind: type } }', True),
        ("subscription S { workflowEvents { type } }", True),
        (EXECUTED, False),
        ("subscription { workflowEvents { type @include(if: true) } }", False),
        ("subscription { workflowEvents { ... on WorkflowEvent { type } } }", False),
        ("subscription { workflowEvents { nope } }", False),
        ("subscription { workflowEvents(bogus: 1) { type } }", False),
        ("subscription { a: workflowEvents { type } b: workflowEvents { type } }", False),
        ("query { queues { name } }", False),
        ("subscription {", False),
    ],
)
def test_only_single_field_scalar_selections_take_the_direct_path(
    document: str, direct: bool
) -> None:
    assert (EventRenderer(schema).plan(document, None) is not None) is direct


def test_an_operation_name_must_name_the_operation() -> None:
    renderer = EventRenderer(schema)
    assert renderer.plan("subscription S { workflowEvents { type } }", "S") is not None
    assert renderer.plan("subscription S { workflowEvents { type } }", "T") is None


def test_arguments_the_resolver_would_reject_leave_the_direct_path() -> None:
    renderer = EventRenderer(schema)
    plan = renderer.plan(DIRECT, None)
    assert plan is not None
    assert renderer.arguments(plan, {"id": "not-a-uuid"}) is None
    assert renderer.arguments(plan, {"after": "-3"}) is None
    taken = renderer.arguments(plan, {"after": "0"})
    assert taken is not None
    assert taken.after_event_id == 0
    assert taken.instance_id is None


async def test_the_direct_path_sends_what_execution_sends(
    api_only: LiveServer,  # noqa: F811
    database_url: str,
) -> None:
    instance_id = await enqueue_hello(api_only)
    direct = asyncio.create_task(collect(api_only, DIRECT, 3, id=instance_id, after="0"))
    executed = asyncio.create_task(collect(api_only, EXECUTED, 3, id=instance_id, after="0"))
    await api_only.wait_for_subscribers(2)
    async with running_services(make_settings(database_url)), asyncio.timeout(20):
        fast: list[dict[str, Any]] = await direct
        slow: list[dict[str, Any]] = await executed
    assert fast == slow
    assert [e["type"] for e in fast] == ["enqueued", "started", "completed"]
    assert {e["__typename"] for e in fast} == {"WorkflowEvent"}
    assert all(isinstance(e["at"], float) for e in fast)


async def test_a_bad_instance_id_still_gets_the_schemas_error(
    api_only: LiveServer,  # noqa: F811
) -> None:
    from gql.transport.exceptions import TransportQueryError

    with pytest.raises(TransportQueryError) as raised:
        await asyncio.wait_for(collect(api_only, DIRECT, 1, id="not-a-uuid"), timeout=10)
    assert raised.value.errors is not None
    assert raised.value.errors[0]["extensions"]["code"] == "BAD_USER_INPUT"


@pytest.mark.parametrize("document", [DIRECT, EXECUTED], ids=["direct", "executed"])
async def test_a_cursor_past_every_event_id_is_refused_on_both_paths(
    api_only: LiveServer,  # noqa: F811
    document: str,
) -> None:
    """A cursor this database never drew (from another database, or from before a restore)
    would skip every event to come, whose ids are lower: both paths refuse it."""
    from gql.transport.exceptions import TransportQueryError

    await enqueue_hello(api_only)
    with pytest.raises(TransportQueryError) as raised:
        await asyncio.wait_for(collect(api_only, document, 1, after="9000000000"), timeout=10)
    assert raised.value.errors is not None
    error = raised.value.errors[0]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert "9000000000" in error["message"]
