"""P-04 at the engine (docs/reliability.md): a table lock held by another session.

While the instances table is locked ACCESS EXCLUSIVE, every engine statement that touches it
gives up after the lock timeout instead of queueing behind the lock; the loop logs the failed
round, backs off, keeps within its pool, and claims again by itself once the lock is gone.
(The API side of P-04, 503 within the lock timeout, is tests/api/test_security_timeout.py.)
"""

import logging

import asyncpg
import pytest

from laneway.config import Settings
from laneway.model import Status
from laneway.services import open_services
from tests.engine.helpers import eventually
from tests.workflows import noop

POOL_SIZE = 3


async def test_a_lock_stall_fails_claim_rounds_fast_and_the_engine_resumes_after_it(
    database_url: str, admin: asyncpg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(
        database_url=database_url,
        lock_timeout_seconds=0.3,
        poll_interval_seconds=0.05,
        pool_size=POOL_SIZE,
        owner_id="stalled",
    )
    caplog.set_level(logging.WARNING, logger="laneway.engine.claim_loop")

    def failed_rounds() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.getMessage() == "claim round failed"]

    async with open_services(settings, workflows=[noop], role="worker") as services:
        engine = services.engine
        async with engine.running():
            before = await engine.enqueue("noop")
            await eventually(
                lambda: engine.get(before.instance.instance_id),
                lambda record: record is not None and record.status == Status.COMPLETED,
            )
            # Due while the table is locked: the engine must take it after the stall.
            during = await engine.enqueue("noop", delay_ms=300)
            async with admin.transaction():
                await admin.execute("LOCK TABLE laneway.instances IN ACCESS EXCLUSIVE MODE")

                async def failures() -> int:
                    return len(failed_rounds())

                await eventually(failures, lambda count: count >= 2, timeout=20)
                sessions = await admin.fetchval(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE application_name = 'laneway-worker-stalled'"
                )
                assert sessions <= POOL_SIZE
            errors = {str(getattr(record, "error", "")) for record in failed_rounds()}
            assert all("lock timeout" in error for error in errors), errors
            done = await eventually(
                lambda: engine.get(during.instance.instance_id),
                lambda record: record is not None and record.status == Status.COMPLETED,
                timeout=20,
            )
    assert done is not None
