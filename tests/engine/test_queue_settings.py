"""Queue settings that survive restarts (issue #18, point 6): a template's queue_settings are
code's defaults, applied at engine start only where no operator has set the queue's caps."""

import asyncio
import contextlib

from laneway.engine import Engine
from laneway.model import QueueRecord, Status
from laneway.store import Store, open_store
from tests.billing_template import billing
from tests.engine.helpers import eventually, make_engine
from tests.workflows import noop


async def _queue(store: Store, name: str) -> QueueRecord:
    (record,) = [q for q in await store.queues() if q.name == name]
    return record


async def _settings(store: Store, name: str) -> tuple[int, float | None, str]:
    record = await _queue(store, name)
    return record.concurrency, record.rate_per_minute, record.settings_source


async def _run_one(engine: Engine) -> None:
    """Complete one instance: the claim loop, and so the start's queue settings, ran."""
    enqueued = await engine.enqueue("billing")
    assert (await engine.wait(enqueued.instance_id, timeout=15)).status is Status.COMPLETED


async def test_code_defaults_apply_to_a_new_queue(store: Store) -> None:
    engine = make_engine(store, billing(3, 120.0), noop)
    async with engine.running():
        await _run_one(engine)
    assert await _settings(store, "billing") == (3, 120.0, "code")
    # A queue no template declares keeps the built-in default, and says so.
    assert await _settings(store, noop.queue_name) == (100, None, "default")


async def test_an_operators_settings_survive_a_restart_with_other_code_defaults(
    store: Store, database_url: str
) -> None:
    first = make_engine(store, billing(3, 120.0))
    async with first.running():
        await _run_one(first)
        record = await first.configure_queue("billing", concurrency=7)
        assert (record.concurrency, record.rate_per_minute) == (7, None)
        assert record.settings_source == "operator"

    # A new deploy, a new process: its template declares other settings.
    async with open_store(database_url) as other_store:
        second = make_engine(other_store, billing(5, 30.0))
        async with second.running():
            await _run_one(second)
        assert await _settings(other_store, "billing") == (7, None, "operator")
        # The operator can still change them; code still does not.
        await second.configure_queue("billing", concurrency=2, rate_per_minute=600.0)
        third = make_engine(other_store, billing(5, 30.0))
        async with third.running():
            await _run_one(third)
        assert await _settings(other_store, "billing") == (2, 600.0, "operator")


async def test_a_changed_code_default_applies_while_the_settings_come_from_code(
    store: Store, database_url: str
) -> None:
    first = make_engine(store, billing(3, 120.0))
    async with first.running():
        await _run_one(first)
    assert await _settings(store, "billing") == (3, 120.0, "code")

    async with open_store(database_url) as other_store:
        second = make_engine(other_store, billing(5))
        async with second.running():
            await _run_one(second)
        assert await _settings(other_store, "billing") == (5, None, "code")


async def test_a_queue_with_the_built_in_default_takes_code_defaults(store: Store) -> None:
    await store.ensure_queues(["billing"])  # e.g. an enqueue before any engine declared it
    assert await _settings(store, "billing") == (100, None, "default")
    engine = make_engine(store, billing(4))
    async with engine.running():
        await _run_one(engine)
    assert await _settings(store, "billing") == (4, None, "code")


async def test_two_engines_starting_at_once_end_with_one_of_their_settings(
    store: Store, database_url: str
) -> None:
    declared = {(2, 60.0), (9, None)}
    async with open_store(database_url) as other_store, contextlib.AsyncExitStack() as stack:
        engines = [
            make_engine(store, billing(2, 60.0), owner_id="deploy-a"),
            make_engine(other_store, billing(9), owner_id="deploy-b"),
        ]
        await asyncio.gather(*(stack.enter_async_context(e.running()) for e in engines))
        # An engine registers as a worker once its start (queue settings first) is done.
        await eventually(store.live_workers, lambda workers: len(workers) == 2)
        concurrency, rate, source = await _settings(store, "billing")
    assert (concurrency, rate) in declared  # one deploy's pair, never a mix
    assert source == "code"


async def test_concurrent_code_writes_never_mix_and_never_override_an_operator(
    store: Store, database_url: str
) -> None:
    async with open_store(database_url) as other_store:
        stores = [store, other_store]
        pairs: list[tuple[int, float | None]] = [(2, 60.0), (9, None)]
        for round_ in range(5):
            name = f"race{round_}"
            written = await asyncio.gather(
                *(stores[i % 2].apply_code_queue_settings(name, *pairs[i % 2]) for i in range(20))
            )
            assert any(written)
            concurrency, rate, source = await _settings(store, name)
            assert (concurrency, rate) in pairs
            assert source == "code"

            await store.configure_queue(name, 5, 1.0)
            written = await asyncio.gather(
                *(stores[i % 2].apply_code_queue_settings(name, *pairs[i % 2]) for i in range(20))
            )
            assert not any(written)
            assert await _settings(store, name) == (5, 1.0, "operator")


async def test_unchanged_code_defaults_are_not_rewritten(store: Store) -> None:
    assert await store.apply_code_queue_settings("steady", 3, None)
    before = await _queue(store, "steady")
    assert not await store.apply_code_queue_settings("steady", 3, None)
    assert await store.apply_code_queue_settings("steady", 4, None)
    after = await _queue(store, "steady")
    assert (before.concurrency, after.concurrency, after.settings_source) == (3, 4, "code")
