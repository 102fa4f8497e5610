"""P-01 (PR tier): PostgreSQL restarted twice under load (fast, then immediate: crash recovery).

Workers must ride it out by themselves (no worker dies), resume claiming within 5 s of the
server accepting connections again, and I1–I4 must hold (reclaims that overlap an outage are
not judged against the lease bound). The server is a private one: restarting the shared test
server would break the tests running next to this one.
"""

from pathlib import Path

import pytest

from tests.chaos.database_faults import p01_restarts
from tests.chaos.harness import RunConfig

pytestmark = pytest.mark.e2e


async def test_p01_workers_resume_and_nothing_is_lost_when_postgres_restarts(
    private_database_url: str, tmp_path: Path
) -> None:
    outcome = await p01_restarts(
        private_database_url,
        tmp_path,
        RunConfig(),
        instances=300,
        rate_per_second=30,
        schedule=[(60, "restart:fast"), (150, "restart:immediate")],
    )
    assert outcome.passed, outcome.explain()
    assert len(outcome.resume_seconds) == 2
