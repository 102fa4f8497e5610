"""The check of a server's answer against the CLI's documents (laneway/cli/answers.py), and a
drift test: the documents are valid against the schema, and the object fields that the schema
lets be null are exactly those the check lets be null."""

from typing import Any

import pytest
from graphql import (
    FieldNode,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    OperationDefinitionNode,
    OperationType,
    SelectionSetNode,
    build_schema,
    get_named_type,
    parse,
    validate,
)

from laneway.api.graphql.schema import export_schema
from laneway.cli import bulk, client, instances, preflight, queues, schedules, workers
from laneway.cli.answers import NULLABLE_OBJECTS, OBJECT_LISTS, lacking, selection
from laneway.cli.client import EXIT_USAGE, REFUSED_CODES, CommandError, raise_for_errors

DOCUMENTS = [
    client.STATUS,
    client.PROGRESS,
    client.LAST_EVENT,
    client.ENQUEUE,
    client.CANCEL,
    client.RETRY,
    client.RESUME,
    client.SIGNAL,
    client.WORKFLOWS,
    client.QUEUES,
    client.EVENTS,
    preflight.PREFLIGHT,
    instances.PAGE,
    queues.QUEUE_HISTORY,
    queues.CONFIGURE_QUEUE,
    queues.PAUSE_QUEUE,
    queues.RESUME_QUEUE,
    workers.WORKERS,
    schedules.SCHEDULES,
    schedules.CREATE_SCHEDULE,
    schedules.SET_SCHEDULE_ENABLED,
    schedules.DELETE_SCHEDULE,
    *(bulk.document(action) for action in bulk.FIELDS),
]


def object_fields(
    parent: GraphQLObjectType, selections: SelectionSetNode
) -> tuple[set[str], set[str]]:
    """The response keys of the object fields in `selections` that the schema lets be null
    (a list whose items may be: `key[]`), and those that hold a list."""
    nullable: set[str] = set()
    lists: set[str] = set()
    for node in selections.selections:
        assert isinstance(node, FieldNode)
        if node.selection_set is None:
            continue
        key = (node.alias or node.name).value
        kind = parent.fields[node.name.value].type
        if not isinstance(kind, GraphQLNonNull):
            nullable.add(key)
        inner = kind.of_type if isinstance(kind, GraphQLNonNull) else kind
        if isinstance(inner, GraphQLList):
            lists.add(key)
            if not isinstance(inner.of_type, GraphQLNonNull):
                nullable.add(f"{key}[]")
        named = get_named_type(kind)
        assert isinstance(named, GraphQLObjectType)
        below = object_fields(named, node.selection_set)
        nullable |= below[0]
        lists |= below[1]
    return nullable, lists


def test_the_documents_are_valid_and_their_nullable_objects_and_lists_are_known() -> None:
    schema = build_schema(export_schema())
    roots = {
        OperationType.QUERY: schema.query_type,
        OperationType.MUTATION: schema.mutation_type,
        OperationType.SUBSCRIPTION: schema.subscription_type,
    }
    nullable: set[str] = set()
    lists: set[str] = set()
    for document in DOCUMENTS:
        parsed = parse(document)
        assert validate(schema, parsed) == [], document
        (operation,) = parsed.definitions
        assert isinstance(operation, OperationDefinitionNode)
        root = roots[operation.operation]
        assert root is not None
        found = object_fields(root, operation.selection_set)
        nullable |= found[0]
        lists |= found[1]
    assert nullable == NULLABLE_OBJECTS
    assert lists == OBJECT_LISTS
    assert not NULLABLE_OBJECTS & OBJECT_LISTS


def test_selection_names_each_response_key_and_what_it_selects() -> None:
    assert selection(client.SIGNAL) == {
        "signalWorkflow": {"signalID": None, "accepted": None, "instance": {"status": None}}
    }
    assert selection(bulk.document("cancel")) == {
        "bulk": {"matched": None, "changed": None, "sampleIDs": None}
    }


@pytest.mark.parametrize(
    ("data", "wrong"),
    [
        ({"workflowInstance": None}, None),  # an unknown instance
        ({"workflowInstance": {"status": "failed", "progress": None, "message": None}}, None),
        ({"workflowInstance": {"status": "failed", "progress": None}}, "workflowInstance.message"),
        ({}, "workflowInstance"),
        ({"workflowInstance": []}, "workflowInstance"),
        ({"workflowInstance": "x"}, "workflowInstance"),
        ([], "data"),
    ],
)
def test_lacking_names_the_first_field_an_answer_does_not_hold(data: Any, wrong: str) -> None:
    assert lacking(client.PROGRESS, data) == wrong


def test_lacking_checks_every_item_of_a_list_and_nulls_where_the_schema_allows_none() -> None:
    queue = {"name": "q", "counts": {"pending": 0}}
    document = "{ queues { name counts { pending } } }"
    assert lacking(document, {"queues": [queue, queue]}) is None
    assert lacking(document, {"queues": [queue, {**queue, "counts": None}]}) == "queues[1].counts"
    assert lacking(document, {"queues": [queue, None]}) == "queues[1]"
    assert lacking(document, {"queues": None}) == "queues"
    assert lacking(document, {"queues": queue}) == "queues"  # one object, not a list of them
    assert lacking(document, {"queues": []}) is None


@pytest.mark.parametrize(
    "code",
    [
        "BAD_USER_INPUT",
        "GRAPHQL_PARSE_FAILED",
        "GRAPHQL_VALIDATION_FAILED",
        "OPERATION_RESOLUTION_FAILURE",
        "BAD_REQUEST",
    ],
)
def test_a_request_the_server_refused_as_asked_wrongly_exits_2_and_changed_nothing(
    code: str,
) -> None:
    """The codes the API gives a request it could not read or run (limits.md) mean the CLI
    asked wrongly (a server of another release, say): exit 2, and nothing of it ran."""
    with pytest.raises(CommandError) as raised:
        raise_for_errors([{"message": "refused", "extensions": {"code": code}}], "the server")
    assert raised.value.exit_code == EXIT_USAGE
    assert code in REFUSED_CODES
