"""The schema executed directly with a real LanewayContext on real services and PostgreSQL.

Queries, mutations, error codes, masking, auth and the validation limits; each test also
checks that no error text leaks internals (conftest.assert_clean).
"""

import logging
import time
from typing import Any
from uuid import UUID

import asyncpg
import pytest
from graphql import build_schema

from laneway.api.graphql.context import laneway_context
from laneway.api.graphql.errors import ERROR_CODES
from laneway.api.graphql.schema import schema
from laneway.cli.client import CommandError, UnreachableError
from laneway.errors import (
    LanewayError,
    LeaseLostError,
    MigrationFailedError,
    MigrationsMissingError,
    MigrationsPendingError,
    OwnerIdInUseError,
    StepWriteRefusedError,
)
from laneway.model import Status
from laneway.services import Services
from tests.api.conftest import (
    TOKEN,
    Execute,
    codes,
    executor,
    make_settings,
    running_services,
    wait_until,
)

SEED_INSTANCE = """
query ($id: ID!) {
  workflowInstance(instanceID: $id) {
    instanceID name queue status attempts lastError createdAt updatedAt
  }
}
"""

ENQUEUE = """
mutation ($name: String!, $params: JSON, $key: String, $delay: Float) {
  enqueueWorkflow(name: $name, params: $params, idempotencyKey: $key, delayMs: $delay) {
    instanceID created instance { status params }
  }
}
"""


async def enqueue(run: Execute, name: str, params: Any = None, **extra: Any) -> str:
    result = await run(ENQUEUE, name=name, params=params, **extra)
    assert result.errors is None, result.errors
    assert result.data is not None
    instance_id: str = result.data["enqueueWorkflow"]["instanceID"]
    return instance_id


async def finished(services: Services, instance_id: str) -> Any:
    return await services.engine.wait(UUID(instance_id), timeout=15)


def all_subclasses(cls: type) -> set[type]:
    found: set[type] = set()
    sub: type
    for sub in cls.__subclasses__():
        found |= {sub} | all_subclasses(sub)
    return found


# Internal, or the command line's own: they never leave a GraphQL field.
NOT_IN_GRAPHQL = {
    LeaseLostError,
    MigrationsMissingError,
    MigrationsPendingError,
    MigrationFailedError,  # at migrate or a start, before any operation
    StepWriteRefusedError,
    CommandError,
    UnreachableError,
    OwnerIdInUseError,  # refused at an engine's start, never by an operation
}


def test_every_public_error_has_a_graphql_code() -> None:
    public = {cls for cls in all_subclasses(LanewayError) if cls not in NOT_IN_GRAPHQL}
    assert public == set(ERROR_CODES)


async def test_seed_instance_query_works_verbatim_with_millisecond_timestamps(
    run: Execute, services: Services
) -> None:
    before = time.time() * 1000
    instance_id = await enqueue(run, "hello", {"name": "Ann"})
    await finished(services, instance_id)
    result = await run(SEED_INSTANCE, id=instance_id)
    assert result.errors is None
    assert result.data is not None
    instance = result.data["workflowInstance"]
    assert instance["instanceID"] == instance_id
    assert (instance["name"], instance["queue"], instance["status"]) == (
        "hello",
        "hello",
        "completed",
    )
    assert instance["attempts"] == 1
    assert instance["lastError"] is None
    assert isinstance(instance["createdAt"], float)
    # The database clock and ours agree within a minute on one machine.
    assert abs(instance["createdAt"] - before) < 60_000
    assert instance["updatedAt"] >= instance["createdAt"]


async def test_hello_completes_with_greeting_and_exposes_no_internal_state(
    run: Execute, services: Services
) -> None:
    instance_id = await enqueue(run, "hello", {"name": "Bo"})
    await finished(services, instance_id)
    result = await run(
        """query ($id: ID!) { workflowInstance(instanceID: $id) {
            result params progress operations { operationID } events { type eventID } } }""",
        id=instance_id,
    )
    assert result.data is not None
    instance = result.data["workflowInstance"]
    assert instance["result"] == {"greeting": "Hello, Bo!"}
    assert instance["params"] == {"name": "Bo"}
    assert instance["operations"] == []
    assert [e["type"] for e in instance["events"]] == ["enqueued", "started", "completed"]
    hidden = await run(
        "query ($id: ID!) { workflowInstance(instanceID: $id) { state } }", id=instance_id
    )
    assert hidden.errors is not None
    assert "Cannot query field 'state'" in hidden.errors[0].message
    assert "Did you mean" not in hidden.errors[0].message


async def test_unknown_instance_is_null_and_malformed_id_is_bad_user_input(run: Execute) -> None:
    missing = await run(SEED_INSTANCE, id="00000000-0000-7000-8000-000000000000")
    assert missing.errors is None
    assert missing.data == {"workflowInstance": None}
    malformed = await run(SEED_INSTANCE, id="not-a-uuid")
    assert codes(malformed) == ["BAD_USER_INPUT"]


async def test_seed_instances_query_filters_by_name_queue_and_status(
    run: Execute, services: Services
) -> None:
    done = await enqueue(run, "hello", {"name": "A"})
    await finished(services, done)
    waiting = await enqueue(run, "hello", {"name": "B"}, delay=3_600_000.0)
    await enqueue(run, "noop", {})
    query = """query ($name: String, $queue: String, $status: String) {
        workflowInstances(name: $name, queue: $queue, status: $status) {
            instanceID name queue status attempts lastError createdAt updatedAt } }"""
    result = await run(query, name="hello", queue="hello", status="pending")
    assert result.data is not None
    assert [i["instanceID"] for i in result.data["workflowInstances"]] == [waiting]
    everything = await run(query, name="hello")
    assert everything.data is not None
    assert {i["instanceID"] for i in everything.data["workflowInstances"]} == {done, waiting}
    both = await run(
        """{ workflowInstances(status: "pending", statuses: ["completed"]) { instanceID } }"""
    )
    assert both.data == {"workflowInstances": []}
    bad = await run('{ workflowInstances(status: "sleeping") { instanceID } }')
    assert codes(bad) == ["BAD_USER_INPUT"]
    too_many = await run("{ workflowInstances(limit: 501) { instanceID } }")
    assert codes(too_many) == ["BAD_USER_INPUT"]


async def test_enqueue_rejects_unknown_workflow_and_bad_params_without_writing(
    run: Execute, services: Services
) -> None:
    unknown = await run(ENQUEUE, name="nope", params={})
    rejected = await run(ENQUEUE, name="hello", params={"name": 5})
    nul = await run(ENQUEUE, name="noop", params={"text": "a\u0000b"})
    surrogate = await run(ENQUEUE, name="noop", params={"text": "\ud800"})
    big = await run(ENQUEUE, name="noop", params={"text": "x" * (256 * 1024 + 1)})
    for result in (unknown, rejected, nul, surrogate, big):
        assert codes(result) == ["BAD_USER_INPUT"]
    assert "name must be a string" in (rejected.errors or [])[0].message
    assert await services.engine.list_instances() == []


async def test_idempotency_key_returns_the_first_instance(run: Execute) -> None:
    first = await run(ENQUEUE, name="noop", params={}, key="once")
    second = await run(ENQUEUE, name="noop", params={}, key="once")
    assert first.data is not None
    assert second.data is not None
    one, two = first.data["enqueueWorkflow"], second.data["enqueueWorkflow"]
    assert (one["created"], two["created"]) == (True, False)
    assert one["instanceID"] == two["instanceID"]


async def test_cancel_unknown_is_not_found_and_cancel_of_terminal_is_a_no_op(
    run: Execute, services: Services
) -> None:
    cancel = "mutation ($id: ID!) { cancelWorkflow(instanceID: $id) { status updatedAt } }"
    missing = await run(cancel, id="00000000-0000-7000-8000-000000000000")
    assert codes(missing) == ["NOT_FOUND"]
    instance_id = await enqueue(run, "hello", {"name": "C"})
    done = await finished(services, instance_id)
    again = await run(cancel, id=instance_id)
    assert again.data is not None
    assert again.data["cancelWorkflow"]["status"] == "completed"
    assert again.data["cancelWorkflow"]["updatedAt"] == done.updated_at.timestamp() * 1000


async def test_cancel_stops_a_running_countdown(run: Execute, services: Services) -> None:
    instance_id = await enqueue(run, "countdown", {"n": 1000, "delayMs": 60_000})

    async def running() -> bool:
        record = await services.engine.get(UUID(instance_id))
        return record is not None and record.status == Status.RUNNING

    await wait_until(running)
    result = await run(
        "mutation ($id: ID!) { cancelWorkflow(instanceID: $id) { status } }", id=instance_id
    )
    assert result.data == {"cancelWorkflow": {"status": "cancelled"}}
    assert (await finished(services, instance_id)).status == Status.CANCELLED


async def test_resume_and_retry_answer_conflict_in_the_wrong_status(
    run: Execute, services: Services
) -> None:
    instance_id = await enqueue(run, "hello", {"name": "D"})
    await finished(services, instance_id)
    for verb in ("resumeWorkflow", "retryWorkflow"):
        result = await run(f'mutation {{ {verb}(instanceID: "{instance_id}") {{ status }} }}')
        assert codes(result) == ["CONFLICT"]
        assert "completed" in (result.errors or [])[0].message


async def test_flaky_fails_after_three_attempts_and_retry_puts_it_back(
    run: Execute, services: Services
) -> None:
    recovered = await enqueue(run, "flaky", {"failTimes": 1})
    failing = await enqueue(run, "flaky", {"failTimes": 5})
    ok = await finished(services, recovered)
    assert (ok.status, ok.attempts) == (Status.COMPLETED, 2)
    failed = await finished(services, failing)
    assert failed.status == Status.FAILED
    assert failed.last_error == "RuntimeError: flaky failure 3"
    result = await run(
        "mutation ($id: ID!) { retryWorkflow(instanceID: $id) { status lastError } }",
        id=failing,
    )
    assert result.data is not None
    assert result.data["retryWorkflow"]["status"] == "pending"


async def test_countdown_reports_progress_and_message(run: Execute, services: Services) -> None:
    instance_id = await enqueue(run, "countdown", {"n": 3, "delayMs": 1})
    await finished(services, instance_id)
    result = await run(
        """query ($id: ID!) { workflowInstance(instanceID: $id) {
            status result progress message events(limit: 2) { type } } }""",
        id=instance_id,
    )
    assert result.data is not None
    instance = result.data["workflowInstance"]
    assert instance["result"] == {"count": 3}
    assert (instance["progress"], instance["message"]) == (1.0, "3 of 3")
    assert [e["type"] for e in instance["events"]] == ["checkpoint", "completed"]


async def test_event_history_pages_after_an_event_id(run: Execute, services: Services) -> None:
    first = await enqueue(run, "hello", {"name": "E"})
    await finished(services, first)
    second = await enqueue(run, "hello", {"name": "F"})
    await finished(services, second)
    history = """query ($after: ID, $id: ID) {
        workflowEventHistory(afterEventID: $after, instanceID: $id) { eventID instanceID type } }"""
    everything = await run(history)
    assert everything.data is not None
    events = everything.data["workflowEventHistory"]
    assert [e["type"] for e in events] == ["enqueued", "started", "completed"] * 2
    ids = [int(e["eventID"]) for e in events]
    assert ids == sorted(ids)
    after = await run(history, after=events[2]["eventID"])
    assert after.data is not None
    assert after.data["workflowEventHistory"] == events[3:]
    one = await run(history, id=second)
    assert one.data is not None
    assert {e["instanceID"] for e in one.data["workflowEventHistory"]} == {second}
    bad = await run(history, after="-1")
    assert codes(bad) == ["BAD_USER_INPUT"]


async def test_workflows_and_queues_describe_the_registry(run: Execute) -> None:
    result = await run(
        """{ workflows { name queue kind stages description }
             queues { name concurrency ratePerMinute paused
                      counts { pending running paused completed failed cancelled } } }"""
    )
    assert result.data is not None
    workflows = {w["name"]: w for w in result.data["workflows"]}
    assert {"hello", "countdown", "flaky", "noop"} <= set(workflows)
    assert workflows["hello"] == {
        "name": "hello",
        "queue": "hello",
        "kind": "handlers",
        "stages": [],
        "description": "Greets `name`.",
    }
    queues = {q["name"]: q for q in result.data["queues"]}
    assert queues["hello"]["paused"] is False
    assert queues["hello"]["counts"] == dict.fromkeys(
        ("pending", "running", "paused", "completed", "failed", "cancelled"), 0
    )


async def test_configure_queue_sets_caps_and_rejects_bad_names(run: Execute) -> None:
    configure = """mutation ($name: String!, $n: Int!, $rate: Float) {
        configureQueue(name: $name, concurrency: $n, ratePerMinute: $rate) {
            name concurrency ratePerMinute paused counts { pending } } }"""
    result = await run(configure, name="mail", n=3, rate=60.0)
    assert result.data == {
        "configureQueue": {
            "name": "mail",
            "concurrency": 3,
            "ratePerMinute": 60.0,
            "paused": False,
            "counts": {"pending": 0},
        }
    }
    for name, n in (('a"; NOTIFY x', 1), ("mail", 0)):
        assert codes(await run(configure, name=name, n=n)) == ["BAD_USER_INPUT"]


async def test_schedules_are_created_listed_toggled_and_deleted(run: Execute) -> None:
    create = """mutation ($name: String!, $every: String, $cron: String, $tz: String) {
        createSchedule(name: $name, workflowName: "hello", params: {name: "S"},
                       every: $every, cron: $cron, timezone: $tz) {
            name workflowName every cron timezone enabled nextRun params } }"""
    created = await run(create, name="greet", every="5m")
    assert created.data is not None
    schedule = created.data["createSchedule"]
    assert schedule["workflowName"] == "hello"
    assert (schedule["every"], schedule["cron"], schedule["timezone"]) == ("5m", None, "UTC")
    assert schedule["enabled"] is True
    assert schedule["nextRun"] > time.time() * 1000
    assert schedule["params"] == {"name": "S"}
    assert codes(await run(create, name="bad", every="soon")) == ["BAD_USER_INPUT"]
    assert codes(await run(create, name="bad", cron="61 * * * *")) == ["BAD_USER_INPUT"]
    # As the Python API: an empty timezone is not a timezone (null takes the default, UTC).
    assert codes(await run(create, name="bad", every="5m", tz="")) == ["BAD_USER_INPUT"]
    # An interval is counted in UTC: the default, or UTC given, and no other timezone.
    assert codes(await run(create, name="bad", every="1d", tz="Europe/Berlin")) == [
        "BAD_USER_INPUT"
    ]
    utc = await run(create, name="utc", every="1d", tz="UTC")
    assert utc.data is not None
    assert utc.data["createSchedule"]["timezone"] == "UTC"
    assert (await run('mutation { deleteSchedule(name: "utc") }')).data == {"deleteSchedule": True}
    assert (await run("{ schedules { name } }")).data == {"schedules": [{"name": "greet"}]}
    toggle = """mutation ($name: String!) { setScheduleEnabled(name: $name, enabled: false) {
        enabled nextRun } }"""
    assert (await run(toggle, name="greet")).data == {
        "setScheduleEnabled": {"enabled": False, "nextRun": None}
    }
    assert codes(await run(toggle, name="nobody")) == ["NOT_FOUND"]
    # Created again (as code declaring it at every start does), it stays disabled.
    again = await run(create, name="greet", every="5m")
    assert again.data is not None
    replaced = again.data["createSchedule"]
    assert (replaced["enabled"], replaced["nextRun"]) == (False, None)
    listed = await run("{ schedules { name enabled } }")
    assert listed.data == {"schedules": [{"name": "greet", "enabled": False}]}
    delete = "mutation ($name: String!) { deleteSchedule(name: $name) }"
    assert (await run(delete, name="greet")).data == {"deleteSchedule": True}
    assert (await run(delete, name="greet")).data == {"deleteSchedule": False}
    # An outside audit: false, where setScheduleEnabled gives NOT_FOUND, was said nowhere.
    described = build_schema(schema.as_str()).mutation_type
    assert described is not None
    said = described.fields["deleteSchedule"].description or ""
    assert "false when no schedule had that name" in said


async def test_unexpected_errors_are_masked_and_logged_once(
    run: Execute, admin: asyncpg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    await admin.execute("ALTER TABLE laneway.schedules RENAME TO schedules_gone")
    with caplog.at_level(logging.ERROR, logger="laneway.api.graphql.schema"):
        result = await run("{ schedules { name } }")
    assert result.errors is not None
    assert [e.message for e in result.errors] == ["Unexpected error."]
    assert codes(result) == ["INTERNAL_SERVER_ERROR"]
    logged = [r for r in caplog.records if r.name == "laneway.api.graphql.schema"]
    assert len(logged) == 1
    assert logged[0].exc_info is not None


async def test_expected_errors_are_not_logged(
    run: Execute, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="laneway.api.graphql.schema"):
        result = await run(ENQUEUE, name="nope", params={})
    assert codes(result) == ["BAD_USER_INPUT"]
    assert [r for r in caplog.records if r.name == "laneway.api.graphql.schema"] == []


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("{ " + " ".join(f"a{i}: workflows {{ name }}" for i in range(16)) + " }", "aliases"),
        ("{ workflows { " + "name " * 2100 + "} }", "more than 2000 tokens"),
    ],
)
async def test_alias_and_token_limits_reject_large_documents(
    run: Execute, query: str, message: str
) -> None:
    result = await run(query)
    assert result.errors is not None
    assert message in result.errors[0].message


async def test_alias_limit_accepts_exactly_fifteen(run: Execute) -> None:
    query = "{ " + " ".join(f"a{i}: workflows {{ name }}" for i in range(15)) + " }"
    result = await run(query)
    assert result.errors is None


def nested(depth: int) -> str:
    """A named query of `depth` (top-level fields are depth 0, as QueryDepthLimiter counts).

    Our schema is only a few levels deep, so deeper documents name fields that do not exist:
    the depth rule reads the document, not the schema, and reports alongside them."""
    inner = "leaf"
    for level in range(depth, 0, -1):
        inner = f"f{level} {{ {inner} }}"
    return f"query deep {{ {inner} }}"


def depth_errors(result: Any) -> list[str]:
    return [e.message for e in result.errors or [] if "depth" in e.message]


async def test_depth_limit_accepts_ten_levels_and_rejects_eleven(run: Execute) -> None:
    assert depth_errors(await run(nested(10))) == []
    assert depth_errors(await run(nested(11))) == ["'deep' exceeds maximum operation depth of 10"]


async def test_mutations_need_a_token_when_tokens_are_configured(database_url: str) -> None:
    settings = make_settings(database_url, api_tokens=(TOKEN,), engine_enabled=False)
    async with running_services(settings) as services:
        anonymous = executor(services)
        wrong = executor(services, "Bearer nope")
        right = executor(services, f"Bearer {TOKEN}")
        mutation = 'mutation { enqueueWorkflow(name: "noop") { created } }'
        assert codes(await anonymous(mutation)) == ["UNAUTHENTICATED"]
        assert codes(await wrong(mutation)) == ["FORBIDDEN"]
        # A token without "Bearer " is a value of another scheme (RFC 9110: the first word is
        # the scheme): no credential, and the message says what is missing.
        assert codes(await executor(services, TOKEN)(mutation)) == ["UNAUTHENTICATED"]
        assert await services.engine.list_instances() == []
        assert (await right(mutation)).data == {"enqueueWorkflow": {"created": True}}
        assert codes(await anonymous("{ workflows { name } }")) == ["UNAUTHENTICATED"]
        assert (await right("{ workflows { name } }")).errors is None


async def test_reads_are_open_when_the_setting_allows_it(database_url: str) -> None:
    settings = make_settings(
        database_url, api_tokens=(TOKEN,), open_reads=True, engine_enabled=False
    )
    async with running_services(settings) as services:
        anonymous = executor(services)
        assert (await anonymous("{ workflows { name } }")).errors is None
        mutation = 'mutation { deleteSchedule(name: "x") }'
        assert codes(await anonymous(mutation)) == ["UNAUTHENTICATED"]


async def test_subscription_replays_and_follows_an_instance(
    run: Execute, services: Services
) -> None:
    instance_id = await enqueue(run, "hello", {"name": "G"})
    context = await laneway_context(services, None)
    stream = await schema.subscribe(
        """subscription ($id: ID!) { workflowEvents(instanceID: $id, afterEventID: "0") {
            type instanceID name status } }""",
        variable_values={"id": instance_id},
        context_value=context,
    )
    received: list[dict[str, Any]] = []
    async for result in stream:
        assert result.errors is None
        assert result.data is not None
        received.append(result.data["workflowEvents"])
        if len(received) == 3:
            break
    await stream.aclose()
    assert [e["type"] for e in received] == ["enqueued", "started", "completed"]
    assert {(e["instanceID"], e["name"]) for e in received} == {(instance_id, "hello")}
    assert received[-1]["status"] == "completed"


async def test_subscription_rejects_a_malformed_cursor(services: Services) -> None:
    context = await laneway_context(services, None)
    stream = await schema.subscribe(
        'subscription { workflowEvents(afterEventID: "abc") { type } }', context_value=context
    )
    results = [result async for result in stream]
    assert [[(e.extensions or {}).get("code") for e in r.errors or []] for r in results] == [
        ["BAD_USER_INPUT"]
    ]
