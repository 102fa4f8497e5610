"""schema.graphql is the exported schema: a change to the code must regenerate it."""

from pathlib import Path

from graphql import (
    GraphQLEnumType,
    build_schema,
    is_introspection_type,
    is_specified_scalar_type,
    print_schema,
)

from laneway.api.graphql.schema import export_schema

SCHEMA_FILE = Path(__file__).resolve().parents[1] / "schema.graphql"


def test_schema_file_matches_the_code() -> None:
    assert SCHEMA_FILE.read_text() == export_schema(), (
        "schema.graphql is out of date; regenerate it with `make schema`"
    )


def without_descriptions(sdl: str) -> str:
    """The SDL with every description left out: each field and its arguments on one line."""
    schema = build_schema(sdl)
    for kind in schema.type_map.values():
        if is_specified_scalar_type(kind) or is_introspection_type(kind):
            continue  # graphql-core's own objects, shared by every schema
        kind.description = None
        if isinstance(kind, GraphQLEnumType):
            for value in kind.values.values():
                value.description = None
            continue
        for field in getattr(kind, "fields", {}).values():
            field.description = None
            for argument in getattr(field, "args", {}).values():
                argument.description = None
    return print_schema(schema)


def test_schema_keeps_the_seed_contract() -> None:
    sdl = without_descriptions(export_schema())
    for line in (
        "workflowInstance(instanceID: ID!): WorkflowInstanceStatus",
        "workflowInstances(name: String, queue: String, status: String, statuses: [String!], "
        "limit: Int = 50, offset: Int = 0): [WorkflowInstanceStatus!]!",
        "workflowEvents(instanceID: ID, name: String, afterEventID: ID): WorkflowEvent!",
        "events(limit: Int = 100): [WorkflowEvent!]!",
        "createdAt: Float!",
        "scalar JSON",
    ):
        assert line in sdl, line
    assert "= null" not in sdl  # an optional input is written `name: Type`, as the contract
    # A worker's ownerID is its key in the workers registry (issue #18), not an instance's
    # owner: every other type is checked.
    worker = sdl.index("type Worker {")
    elsewhere = sdl[:worker] + sdl[sdl.index("}", worker) :]
    for hidden in ("state", "nextAction", "ownerID", "leaseExpiresAt"):
        assert f"  {hidden}:" not in elsewhere
