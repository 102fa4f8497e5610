"""Child instances a handler enqueues: one per (parent, workflow, key), found again on a re-run."""

from uuid import UUID

from laneway.engine import Done, HandlerContext, RetryPolicy, Workflow
from laneway.errors import InvalidInputError
from laneway.model import JSONValue, Status
from laneway.store import Store
from tests.engine.helpers import make_engine


async def _kid_run(ctx: HandlerContext, params: JSONValue) -> Done:
    return Done(params)


kid = Workflow("kid", handlers={"run": _kid_run}, initial="run")
# A name with a `:` is a name: its children must not meet the keyed children of "kid".
kid_one = Workflow("kid:1", handlers={"run": _kid_run}, initial="run")


def _fan_out(spawned: list[list[UUID]], keyed: bool) -> Workflow:
    """A parent that starts three children of "kid", then fails its first attempt (so the
    second runs the same handler again); `spawned` gets each attempt's ids."""

    async def run(ctx: HandlerContext, params: JSONValue) -> Done:
        tools = ctx.require_tools()
        ids = [
            await tools.enqueue_child("kid", {"i": i}, key=str(i) if keyed else None)
            for i in range(3)
        ]
        spawned.append(ids)
        if ctx.attempt == 1:
            raise RuntimeError("crash after the children were enqueued")
        return Done([str(i) for i in ids])

    return Workflow(
        "fan_out",
        handlers={"run": run},
        initial="run",
        retry=RetryPolicy(max_attempts=2, backoff="fixed", base_ms=0),
    )


async def test_keyed_children_of_one_workflow_are_one_instance_each(store: Store) -> None:
    spawned: list[list[UUID]] = []
    engine = make_engine(store, _fan_out(spawned, keyed=True), kid)
    parent = await engine.enqueue("fan_out")
    for _ in range(3):
        await engine.tick()
    first, again = spawned  # the re-run of the handler found the same three children
    assert first == again
    assert len(set(first)) == 3
    for i, child_id in enumerate(first):
        child = await engine.get(child_id)
        assert child is not None
        assert (child.name, child.params, child.parent_id) == ("kid", {"i": i}, parent.instance_id)
        assert child.idempotency_key == f"chain:{parent.instance_id}:kid#{i}"
    done = await engine.get(parent.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED


async def test_unkeyed_children_of_one_workflow_are_still_one_instance(store: Store) -> None:
    spawned: list[list[UUID]] = []
    engine = make_engine(store, _fan_out(spawned, keyed=False), kid)
    parent = await engine.enqueue("fan_out")
    for _ in range(3):
        await engine.tick()
    [[child_id, *others], again] = spawned
    assert others == [child_id, child_id]
    assert again == [child_id] * 3
    child = await engine.get(child_id)
    assert child is not None
    # The key of children before keys existed: a parent in flight across an upgrade finds its
    # child; and the first call's params are the child's.
    assert child.idempotency_key == f"chain:{parent.instance_id}:kid"
    assert (child.params, child.parent_id) == ({"i": 0}, parent.instance_id)


async def test_a_keyed_child_never_meets_another_workflows_child(store: Store) -> None:
    async def run(ctx: HandlerContext, params: JSONValue) -> Done:
        tools = ctx.require_tools()
        keyed = await tools.enqueue_child("kid", {"keyed": True}, key="1")
        named = await tools.enqueue_child("kid:1", {"keyed": False})
        return Done([str(keyed), str(named)])

    engine = make_engine(
        store, Workflow("pair", handlers={"run": run}, initial="run"), kid, kid_one
    )
    parent = await engine.enqueue("pair")
    await engine.tick()
    done = await engine.get(parent.instance_id)
    assert done is not None
    assert isinstance(done.result, list)
    keyed, named = [await engine.get(UUID(str(i))) for i in done.result]
    assert keyed is not None
    assert named is not None
    assert (keyed.name, keyed.params) == ("kid", {"keyed": True})
    assert (named.name, named.params) == ("kid:1", {"keyed": False})


async def test_a_bad_child_key_is_refused_with_what_a_key_may_be(store: Store) -> None:
    refused: list[str] = []

    async def run(ctx: HandlerContext, params: JSONValue) -> Done:
        for key in ("", "k" * 129, "nul\x00", 5):
            try:
                await ctx.require_tools().enqueue_child("kid", None, key=key)  # type: ignore[arg-type]
            except InvalidInputError as exc:
                refused.append(str(exc))
        await ctx.require_tools().enqueue_child("kid", None, key="k" * 128)
        return Done()

    engine = make_engine(store, Workflow("bad", handlers={"run": run}, initial="run"), kid)
    parent = await engine.enqueue("bad")
    await engine.tick()
    assert refused == [
        "child key must be 1-128 characters",
        "child key must be 1-128 characters",
        "child key must not contain NUL or lone surrogate characters",
        "child key must be a string, not int",  # it said "1-128 characters" (an audit)
    ]
    done = await engine.get(parent.instance_id)
    assert done is not None
    assert done.status == Status.COMPLETED
