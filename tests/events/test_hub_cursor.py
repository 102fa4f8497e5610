"""EventHub.open_stream's cursor check: a resume point past every id the database drew is
refused, any id it drew is a valid resume point (committed, or drawn by a rollback)."""

import pytest

from laneway.errors import InvalidInputError
from laneway.events import EventHub
from laneway.store import Store
from laneway.store.pool import connect
from tests.events.test_hub import any_event, make_engine, take, write_events


async def test_a_cursor_past_the_last_drawn_event_id_is_refused(
    store: Store, database_url: str
) -> None:
    await write_events(make_engine(store), 3)
    drawn = await store.last_drawn_event_id()
    async with EventHub.open(database_url, store, poll_seconds=60) as hub:
        with pytest.raises(InvalidInputError, match=rf"{drawn + 1}.*\({drawn}\)"):
            async with hub.open_stream(after_event_id=drawn + 1, matches=any_event):
                pass
        assert hub.subscriber_count == 0


async def test_an_id_drawn_by_a_rolled_back_write_is_a_valid_cursor(
    store: Store, database_url: str
) -> None:
    engine = make_engine(store)
    await write_events(engine, 2)
    conn = await connect(database_url)
    try:  # an id drawn, never committed: what a rolled-back append leaves
        skipped: int = await conn.fetchval(
            "SELECT nextval(pg_get_serial_sequence('laneway.events', 'event_id'))"
        )
    finally:
        await conn.close()
    assert skipped > await store.latest_event_id()
    async with (
        EventHub.open(database_url, store, poll_seconds=60) as hub,
        hub.open_stream(after_event_id=skipped, matches=any_event) as stream,
    ):
        await write_events(engine, 2)
        later = await take(stream, 2)
    assert all(event.event_id > skipped for event in later)


async def test_before_the_first_event_only_zero_is_a_cursor(
    store: Store, database_url: str
) -> None:
    assert await store.last_drawn_event_id() == 0
    async with EventHub.open(database_url, store, poll_seconds=60) as hub:
        with pytest.raises(InvalidInputError):
            async with hub.open_stream(after_event_id=1, matches=any_event):
                pass
        async with hub.open_stream(after_event_id=0, matches=any_event) as stream:
            await write_events(make_engine(store), 1)
            assert len(await take(stream, 1)) == 1
