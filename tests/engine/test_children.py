"""Child instances a handler enqueues: one per (parent, workflow, key), found again on a re-run;
and the signals a handler sends through its tools (a child telling its parent it is done)."""

from uuid import UUID

from laneway.engine import Done, Engine, HandlerContext, RetryPolicy, WaitForSignal, Workflow
from laneway.errors import ConflictError, InvalidInputError, NotFoundError
from laneway.model import InstanceRecord, JSONValue, Status
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


# -- children signalling their parent ------------------------------------------------------------


async def _waits_for_three_start(ctx: HandlerContext, params: JSONValue) -> WaitForSignal:
    tools = ctx.require_tools()
    for i in range(3):
        await tools.enqueue_child(
            "signalling_kid", {"parent": str(ctx.instance_id), "i": i}, key=str(i)
        )
    ctx.state["got"] = []
    return WaitForSignal("child-done", None, then="collect")


async def _waits_for_three_collect(ctx: HandlerContext, params: JSONValue) -> WaitForSignal | Done:
    got = ctx.state["got"]
    assert isinstance(got, list)
    got.append(params)
    if len(got) < 3:
        return WaitForSignal("child-done", None, then="collect")
    return Done(got)


waits_for_three = Workflow(
    "waits_for_three",
    handlers={"start": _waits_for_three_start, "collect": _waits_for_three_collect},
    initial="start",
)


def _signalling_kid(sent: list[tuple[int, int, bool]], *, crash_first: bool) -> Workflow:
    """A child that signals its parent "child-done" with its index, keyed by its own id;
    `sent` gets (index, attempt, accepted) of each call. With `crash_first`, its first
    attempt fails after the signal went out, so the second sends it again."""

    async def run(ctx: HandlerContext, params: JSONValue) -> Done:
        assert isinstance(params, dict)
        i = params["i"]
        assert isinstance(i, int)
        accepted = await ctx.require_tools().signal(
            UUID(str(params["parent"])),
            "child-done",
            {"i": i},
            idempotency_key=f"done:{ctx.instance_id}",
        )
        sent.append((i, ctx.attempt, accepted))
        if crash_first and ctx.attempt == 1:
            raise RuntimeError("crash after the signal was sent")
        return Done()

    return Workflow(
        "signalling_kid",
        handlers={"run": run},
        initial="run",
        retry=RetryPolicy(max_attempts=2, backoff="fixed", base_ms=0),
    )


async def _tick_until_ended(engine: Engine, instance_id: UUID) -> InstanceRecord:
    status = None
    for _ in range(10):
        await engine.tick()
        record = await engine.get(instance_id)
        assert record is not None
        if record.is_terminal:
            return record
        status = record.status
    raise AssertionError(f"{instance_id} did not end in 10 ticks: {status}")


async def _signals_to(store: Store, instance_id: UUID) -> int:
    async with store.connection() as conn:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM laneway.signals WHERE instance_id = $1", instance_id
        )
    return count


async def test_children_signal_their_parent_through_their_tools(store: Store) -> None:
    sent: list[tuple[int, int, bool]] = []
    engine = make_engine(store, waits_for_three, _signalling_kid(sent, crash_first=False))
    parent = await engine.enqueue("waits_for_three")
    done = await _tick_until_ended(engine, parent.instance_id)
    assert done.status == Status.COMPLETED
    assert isinstance(done.result, list)
    assert sorted(done.result, key=str) == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert sorted(sent) == [(0, 1, True), (1, 1, True), (2, 1, True)]


async def test_a_rerun_of_a_childs_signalling_step_sends_nothing_twice(store: Store) -> None:
    sent: list[tuple[int, int, bool]] = []
    engine = make_engine(store, waits_for_three, _signalling_kid(sent, crash_first=True))
    parent = await engine.enqueue("waits_for_three")
    done = await _tick_until_ended(engine, parent.instance_id)
    assert done.status == Status.COMPLETED
    assert isinstance(done.result, list)
    assert sorted(done.result, key=str) == [{"i": 0}, {"i": 1}, {"i": 2}]
    # Each child sent on both attempts; its key made the second a no-op, not a kept signal.
    assert sorted(sent) == [(i, attempt, attempt == 1) for i in range(3) for attempt in (1, 2)]
    assert await _signals_to(store, parent.instance_id) == 3


async def test_a_handlers_signal_is_refused_as_the_engines_is(store: Store) -> None:
    refused: list[tuple[str, str]] = []

    async def run(ctx: HandlerContext, params: JSONValue) -> Done:
        assert isinstance(params, dict)
        tools = ctx.require_tools()
        tries = [
            (UUID(str(params["ended"])), "child-done"),  # an ended instance
            (UUID(int=7), "child-done"),  # no such instance
            (UUID(str(params["ended"])), "no spaces"),  # a bad name
        ]
        for target, name in tries:
            try:
                await tools.signal(target, name, idempotency_key="once")
            except (ConflictError, NotFoundError, InvalidInputError) as exc:
                refused.append((type(exc).__name__, str(exc)))
        return Done()

    engine = make_engine(store, Workflow("pinger", handlers={"run": run}, initial="run"), kid)
    ended = await engine.enqueue("kid")
    await engine.tick()
    pinger = await engine.enqueue("pinger", {"ended": str(ended.instance_id)})
    done = await _tick_until_ended(engine, pinger.instance_id)
    assert done.status == Status.COMPLETED
    assert [kind for kind, _ in refused] == ["ConflictError", "NotFoundError", "InvalidInputError"]
    assert "completed" in refused[0][1]
    assert "signal name" in refused[2][1]
