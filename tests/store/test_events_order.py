"""The event log: ids become visible in id order even when writers commit out of order."""

import asyncio
import uuid

import asyncpg

from laneway.model import EventType, NewEvent, Status
from laneway.store import Store
from laneway.store.pool import connect


def _event() -> NewEvent:
    return NewEvent(
        instance_id=uuid.uuid4(), name="probe", type=EventType.ENQUEUED, status=Status.PENDING
    )


async def test_reader_never_skips_when_commits_arrive_in_reverse(
    store: Store, database_url: str
) -> None:
    first_writer = await connect(database_url)
    second_writer = await connect(database_url)
    try:
        before = await store.latest_event_id()
        first_tx = first_writer.transaction()
        await first_tx.start()
        first_id = await store._append_events(first_writer, [_event()])
        second_appended = asyncio.Event()

        async def second() -> int | None:
            async with second_writer.transaction():
                event_id = await store._append_events(second_writer, [_event()])
            second_appended.set()
            return event_id

        second_task = asyncio.create_task(second())
        # The second writer must wait for the first one's commit: until then a reader sees
        # neither event, never the later id alone.
        for _ in range(20):
            seen = await store.events_after(before, 10)
            assert seen == []
            await asyncio.sleep(0)
        assert not second_appended.is_set()
        await first_tx.commit()
        second_id = await asyncio.wait_for(second_task, timeout=10)
        seen = await store.events_after(before, 10)
    finally:
        await first_writer.close()
        await second_writer.close()
    assert first_id is not None
    assert second_id is not None
    assert first_id < second_id
    assert [e.event_id for e in seen] == [first_id, second_id]


async def test_notify_payload_stays_small_whatever_the_error_size(
    store: Store, database_url: str
) -> None:
    listener = await asyncpg.connect(database_url)
    payloads: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener("laneway_events", lambda *args: payloads.put_nowait(args[3]))
    try:
        huge = NewEvent(
            instance_id=uuid.uuid4(),
            name="probe",
            type=EventType.FAILED,
            status=Status.FAILED,
            error="x" * 100_000,
        )
        async with store.connection() as conn, conn.transaction():
            await store._append_events(conn, [huge, _event()], cancelled_ids=[uuid.uuid4()])
        payload = await asyncio.wait_for(payloads.get(), timeout=10)
    finally:
        await listener.close()
    assert len(payload.encode()) < 200
    assert '"e":' in payload
    assert '"c":' in payload
