"""Checkpoint input schemas' references: resolved within the schema, never fetched.

One that does not resolve is refused where the schema is made; a schema that got in anyway
(paused by a release that did not check) refuses each resume clearly, without fetching
anything, and a bulk resume leaves its instance paused instead of failing.
"""

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from uuid import UUID

import asyncpg
import pytest

from laneway.engine import Checkpoint, Done, HandlerContext, OnExpiry, Pause, Workflow
from laneway.engine.requests import EnqueueRequest
from laneway.engine.waits import validate_input
from laneway.errors import InputRejectedError, InvalidInputError
from laneway.model import EventType, InstanceFilter, JSONValue, Status
from laneway.store import Store
from tests.engine.helpers import make_engine, types_of

REMOTE = "REMOTE"  # stands for the listener's URL in parametrized schemas

DEFS_SCHEMA: dict[str, JSONValue] = {
    "type": "object",
    "required": ["decision"],
    "properties": {"decision": {"$ref": "#/$defs/decision"}},
    "$defs": {"decision": {"enum": ["approve", "reject"]}},
}


@dataclass
class Listener:
    """A TCP port on 127.0.0.1 that counts the connections made to it and closes each at
    once: a fetch of a schema from `url` shows in `connections` instead of hanging a test."""

    url: str
    connections: int = 0


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.05)
    seen = Listener(url=f"http://127.0.0.1:{server.getsockname()[1]}/schema.json")
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            seen.connections += 1
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join()
        server.close()


def _with_url(schema: dict[str, JSONValue], url: str) -> dict[str, JSONValue]:
    loaded = json.loads(json.dumps(schema).replace(REMOTE, url))
    assert isinstance(loaded, dict)
    return loaded


NEVER_FETCHED = " (a reference to another document is never fetched)"


@pytest.mark.parametrize(
    ("schema", "named"),
    [
        ({"$ref": "http://127.0.0.1:8629/s.json"}, "'http://127.0.0.1:8629/s.json'"),
        ({"$ref": "file:///etc/passwd"}, "'file:///etc/passwd'"),
        ({"$id": "https://example.invalid/root.json", "$ref": "other.json"}, "'other.json'"),
        # bundled with jsonschema, but not within the schema
        ({"$ref": "https://json-schema.org/draft/2020-12/schema"}, "'https://json-schema.org"),
        ({"$ref": "#/$defs/nope"}, "'#/$defs/nope'"),
        ({"$ref": "#nope", "$defs": {"a": {"$anchor": "other"}}}, "'#nope'"),
        ({"properties": {"a": {"items": {"$ref": "#/$defs/no"}}}}, "'#/$defs/no'"),
        ({"$dynamicRef": "#/$defs/nope"}, "$dynamicRef '#/$defs/nope'"),
        ({"$schema": "http://json-schema.org/draft-07/schema#", "$ref": "#/x"}, "'#/x'"),
    ],
)
def test_a_reference_not_within_the_schema_is_refused_where_it_is_made(
    schema: dict[str, JSONValue], named: str
) -> None:
    with pytest.raises(InvalidInputError) as paused:
        Pause("decide", "next", input_schema=schema)
    with pytest.raises(InvalidInputError) as checkpoint:
        Checkpoint(after_stage="a", label="decide", input_schema=schema)
    for refused in (paused, checkpoint):
        message = str(refused.value)
        assert message.startswith("checkpoint 'decide': input_schema is not a valid JSON Schema")
        assert named in message
        assert "does not resolve within the schema" in message
        assert message.endswith(NEVER_FETCHED) == ("'#" not in named)


@pytest.mark.parametrize(
    "schema",
    [
        DEFS_SCHEMA,
        {"$ref": "#good", "$defs": {"a": {"$anchor": "good", "type": "object"}}},
        {
            "$id": "https://example.invalid/root.json",
            "$ref": "sub.json",
            "$defs": {"s": {"$id": "sub.json", "$ref": "#/$defs/t", "$defs": {"t": {}}}},
        },
        {"$dynamicRef": "#meta", "$defs": {"m": {"$dynamicAnchor": "meta"}}},
        {"$schema": "http://json-schema.org/draft-07/schema#", "$ref": "#/definitions/d",
         "definitions": {"d": {}}},
    ],
)  # fmt: skip
def test_a_reference_within_the_schema_is_accepted(schema: dict[str, JSONValue]) -> None:
    Pause("decide", "next", input_schema=schema)
    Checkpoint(after_stage="a", label="decide", input_schema=schema)


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#"},
        {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
        {"anyOf": [{"type": "null"}, {"$ref": "#"}]},  # any input but null recurses forever
    ],
)
def test_references_that_loop_without_reading_the_input_are_refused(
    schema: dict[str, JSONValue],
) -> None:
    # They resolve, so the reference check passed them; then every resume was refused, as
    # "cannot be used", with no input that could pass.
    for made in (
        lambda: Pause("decide", "next", input_schema=schema),
        lambda: Checkpoint(after_stage="a", label="decide", input_schema=schema),
    ):
        with pytest.raises(InvalidInputError, match="loop without reading the input"):
            made()


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"child": {"$ref": "#"}}},  # a tree: it reads
        {"type": "array", "items": {"$ref": "#"}},
    ],
)
def test_a_recursive_schema_that_reads_the_input_is_accepted(
    schema: dict[str, JSONValue],
) -> None:
    Pause("decide", "next", input_schema=schema)
    validate_input(schema, {"child": {"child": {}}} if "properties" in schema else [[[]]],
                   label="decide")  # fmt: skip


# jsonschema's default registry warns before it fetches; the warning would be raised as an
# error here (filterwarnings), so that nothing would be fetched even without the fix.
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_an_expiry_input_is_not_checked_by_fetching_the_schema(listener: Listener) -> None:
    remote = {"$ref": listener.url}
    with pytest.raises(InvalidInputError, match="not a valid JSON Schema: its \\$ref"):
        Pause(
            "decide", "next", input_schema=remote, timeout_seconds=5, on_expiry=OnExpiry("resume")
        )
    with pytest.raises(InvalidInputError, match="not a valid JSON Schema: its \\$ref"):
        Checkpoint(
            after_stage="a",
            label="decide",
            input_schema=remote,
            timeout_seconds=5,
            on_expiry=OnExpiry("resume", {"x": 1}),
        )
    assert listener.connections == 0


def _pauser(name: str, schema: JSONValue) -> Workflow:
    async def ask(ctx: HandlerContext, params: JSONValue) -> Pause:
        return Pause("decide", "decided", input_schema=schema)

    async def decided(ctx: HandlerContext, params: JSONValue) -> Done:
        return Done({"params": params})

    return Workflow(name, handlers={"ask": ask, "decided": decided}, initial="ask")


async def test_a_local_defs_reference_is_followed_end_to_end(store: Store) -> None:
    engine = make_engine(store, _pauser("defs", DEFS_SCHEMA))
    enqueued = await engine.enqueue("defs")
    await engine.tick()
    with pytest.raises(InputRejectedError) as refused:
        await engine.resume(enqueued.instance_id, {"decision": "maybe"})
    assert refused.value.problems[0][0] == "$.decision"
    assert "$.decision" in str(refused.value)
    await engine.resume(enqueued.instance_id, {"decision": "approve"})
    await engine.tick()
    done = await engine.get(enqueued.instance_id)
    assert done is not None
    assert done.result == {"params": {"decision": "approve"}}


async def _older_release_schema(
    admin: asyncpg.Connection, instance_id: UUID, schema: JSONValue
) -> None:
    """What a release that did not check references let a pause keep: written as it stored it."""
    await admin.execute(
        "UPDATE laneway.instances SET wait = jsonb_set(wait, '{input_schema}', $2::jsonb)"
        " WHERE instance_id = $1",
        instance_id,
        json.dumps(schema),
    )


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # see the expiry test above
@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ({"$ref": REMOTE}, "never fetched"),
        ({"properties": {"decision": {"$ref": REMOTE}}}, "never fetched"),
        ({"$ref": "#/$defs/nope"}, "does not resolve within the schema"),
        ({"$ref": "#"}, "recursed too deeply"),  # a loop: no input can end it
    ],
)
async def test_a_schema_that_got_in_refuses_each_resume_without_fetching(
    store: Store,
    admin: asyncpg.Connection,
    listener: Listener,
    schema: dict[str, JSONValue],
    reason: str,
) -> None:
    engine = make_engine(store, _pauser("older", {"type": "object"}))
    enqueued = await engine.enqueue("older")
    await engine.tick()
    schema = _with_url(schema, listener.url)
    await _older_release_schema(admin, enqueued.instance_id, schema)
    for _ in range(2):
        with pytest.raises(InputRejectedError) as refused:
            await engine.resume(enqueued.instance_id, {"decision": "approve"})
        assert "the input schema of checkpoint 'decide' cannot be used" in str(refused.value)
        assert reason in str(refused.value)
        assert refused.value.problems[0][0] == "$"
    assert listener.connections == 0
    still = await engine.get(enqueued.instance_id)
    assert still is not None
    assert still.status == Status.PAUSED
    assert still.checkpoint_input_schema == schema
    assert EventType.RESUMED not in await types_of(store, enqueued.instance_id)


async def test_bulk_resume_leaves_paused_an_instance_whose_schema_cannot_be_used(
    store: Store, admin: asyncpg.Connection
) -> None:
    engine = make_engine(store, _pauser("optional", {"type": ["object", "null"]}))
    enqueued = await engine.enqueue_many([EnqueueRequest(name="optional") for _ in range(5)])
    while await engine.tick():
        pass
    ids = [e.instance_id for e in enqueued]
    bad = ids[2]
    await _older_release_schema(admin, bad, {"$ref": "#/$defs/nope"})
    result = await engine.resume_many(InstanceFilter())
    assert (result.matched, result.changed) == (5, 4)
    statuses = {r.instance_id: r.status for r in await engine.list_instances(limit=10)}
    assert statuses == {i: Status.PAUSED if i == bad else Status.PENDING for i in ids}
    again = await engine.resume_many(InstanceFilter())
    assert (again.matched, again.changed) == (1, 0)
