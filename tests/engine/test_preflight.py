"""The deploy preflight (issue #21): it finds a renamed handler, a dropped version and a
dropped template stage among the instances in flight, and is clean for a compatible change."""

import asyncpg
import pytest

from laneway import Done, HandlerContext, Next, Workflow
from laneway.engine.handler_map import Handler
from laneway.engine.preflight import WorkflowSpec, judge, specs_of
from laneway.engine.registry import WorkflowRegistry
from laneway.errors import InvalidInputError
from laneway.model import JSONValue
from laneway.store import Store
from tests.engine.helpers import make_engine


async def _step(ctx: HandlerContext, params: JSONValue) -> Done:
    return Done()


def shipping(version: str, *actions: str) -> Workflow:
    async def first(ctx: HandlerContext, params: JSONValue) -> Next:
        return Next(actions[-1])

    handlers: dict[str, Handler] = {actions[0]: first}
    handlers.update({action: _step for action in actions[1:]})
    return Workflow(name="ship", version=version, handlers=handlers, initial=actions[0])


async def test_a_renamed_handler_strands_the_instances_that_would_run_it(
    store: Store, admin: asyncpg.Connection
) -> None:
    old = make_engine(store, shipping("1", "pack", "send"))
    ids = [(await old.enqueue("ship")).instance_id for _ in range(3)]
    # Two of them got past `pack` and wait to run `send`; one is still at `pack`.
    await admin.execute(
        "UPDATE laneway.instances SET next_action = 'send' WHERE instance_id = ANY($1)", ids[:2]
    )
    renamed = WorkflowRegistry([shipping("1", "pack", "dispatch")])  # send -> dispatch

    (finding,) = await old.preflight(specs_of(renamed))

    assert (finding.name, finding.version, finding.reason) == ("ship", "1", "ACTION_MISSING")
    assert (finding.detail, finding.count) == ("send", 2)
    assert sorted(finding.sample_ids) == sorted(str(i) for i in ids[:2])


async def test_a_dropped_version_strands_its_instances_and_a_kept_one_does_not(
    store: Store,
) -> None:
    both = make_engine(store, shipping("1", "pack", "send"), shipping("2", "pack", "send"))
    v1 = [(await both.enqueue("ship", version="1")).instance_id for _ in range(2)]
    await both.enqueue("ship")  # version 2

    only_v2 = specs_of(WorkflowRegistry([shipping("2", "pack", "send")]))
    (finding,) = await both.preflight(only_v2)
    assert (finding.version, finding.reason, finding.count) == ("1", "VERSION_GONE", 2)
    assert finding.detail == "version '1' is not in the new code (it has '2')"
    assert list(finding.sample_ids) == [str(i) for i in reversed(v1)]  # newest first

    # A compatible change: both versions stay (v2 gains an action): nothing is stranded.
    compatible = specs_of(
        WorkflowRegistry([shipping("1", "pack", "send"), shipping("2", "pack", "check", "send")])
    )
    assert await both.preflight(compatible) == []
    assert await both.preflight() == []  # the code registered here runs everything


async def test_a_workflow_gone_from_the_new_code_is_named_so(store: Store) -> None:
    engine = make_engine(store, shipping("1", "pack", "send"))
    await engine.enqueue("ship")
    (finding,) = await engine.preflight([])
    assert (finding.reason, finding.detail) == (
        "VERSION_GONE",
        "workflow 'ship' is not in the new code",
    )


async def test_a_template_stage_gone_and_a_timeout_handler_gone_are_found(
    store: Store, admin: asyncpg.Connection
) -> None:
    engine = make_engine(store, shipping("1", "pack", "send"))
    stage_run = (await engine.enqueue("ship")).instance_id
    waiting = (await engine.enqueue("ship")).instance_id
    await admin.execute(
        """UPDATE laneway.instances SET status = 'waiting', next_action = 'send',
                  wait = '{"on_timeout": "give_up"}' WHERE instance_id = $1""",
        waiting,
    )
    as_template = [WorkflowSpec(name="ship", version="1", actions=("send",), stages=("send",))]
    findings = await engine.preflight(as_template)
    assert [(f.reason, f.detail, f.count) for f in findings] == [
        ("STAGE_MISSING", "give_up", 1),
        ("STAGE_MISSING", "pack", 1),
    ]
    assert [list(f.sample_ids) for f in findings] == [[str(waiting)], [str(stage_run)]]


async def test_an_empty_stage_list_is_a_handler_maps_spec(store: Store) -> None:
    # `workflows { stages }` answers [] for a handler map; a spec built from it listed every
    # instance in flight of that workflow as STAGE_MISSING (a template has at least one stage).
    engine = make_engine(store, shipping("1", "pack", "send"))
    await engine.enqueue("ship")
    spec = WorkflowSpec(name="ship", version="1", actions=("pack", "send"), stages=())
    assert spec.stages is None
    assert await engine.preflight([spec]) == []
    dropped = WorkflowSpec(name="ship", version="1", actions=("send",), stages=())
    assert [f.reason for f in await engine.preflight([dropped])] == ["ACTION_MISSING"]


def test_a_spec_is_checked() -> None:
    spec = WorkflowSpec(name="ship", version="1", actions=("a",))
    with pytest.raises(InvalidInputError, match="listed twice"):
        judge([spec, spec], [])
    with pytest.raises(InvalidInputError, match="action name"):
        WorkflowSpec(name="ship", version="1", actions=("no spaces",))
    with pytest.raises(InvalidInputError, match="version"):
        WorkflowSpec(name="ship", version="", actions=())
