"""R-02 (PR tier): a worker SIGSTOPped past its lease, then SIGCONTed, must write nothing stale.

The stop lasts until other workers have recovered every lease it held; once awake, the zombie
must drop those instances (its writes fenced out, or its heartbeat finding the leases gone)
and go back to work.
"""

from pathlib import Path

import pytest

from tests.chaos.crashes import r02_zombies
from tests.chaos.harness import RunConfig

pytestmark = pytest.mark.e2e


async def test_r02_a_zombie_writes_nothing_and_its_instances_finish_elsewhere(
    database_url: str, tmp_path: Path
) -> None:
    config = RunConfig(workers=3, lease_seconds=2.0, poll_seconds=0.2)
    outcome = await r02_zombies(database_url, tmp_path, config, stops=1, rate_per_second=30)
    assert outcome.passed, outcome.explain()
    assert outcome.verdict.stale_writes == []
