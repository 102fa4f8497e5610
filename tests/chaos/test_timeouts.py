"""P-05 (PR tier): the engine's role timeouts are set on the sessions workers write through, and
a transaction a step leaves idle is ended by the server, failing that attempt only.

tests/store/test_connections.py shows the settings on an in-process pool; here they are read
from the audit rows of real worker processes, as PostgreSQL saw them at each write.
"""

from pathlib import Path

import pytest

from tests.chaos.database_faults import p05_timeouts
from tests.chaos.harness import RunConfig

pytestmark = pytest.mark.e2e


async def test_p05_worker_sessions_carry_the_timeouts_and_an_idle_transaction_is_ended(
    database_url: str, tmp_path: Path
) -> None:
    outcome = await p05_timeouts(
        database_url,
        tmp_path,
        RunConfig(workers=2, idle_in_transaction_seconds=1.0),
        statement_seconds=7,
        lock_seconds=3,
        expected_timeouts="7s/3s/1s",
    )
    assert outcome.passed, outcome.explain()
