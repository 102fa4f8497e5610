"""R-03 (PR tier): one worker's database link is blackholed past its lease, then healed."""

from pathlib import Path

import pytest

from tests.chaos.crashes import r03_partitions
from tests.chaos.harness import RunConfig

pytestmark = pytest.mark.e2e


async def test_r03_a_partitioned_worker_writes_nothing_stale_and_recovers_after_healing(
    database_url: str, tmp_path: Path
) -> None:
    config = RunConfig(workers=3, lease_seconds=2.0, poll_seconds=0.2)
    outcome = await r03_partitions(database_url, tmp_path, config, partitions=1, rate_per_second=30)
    assert outcome.passed, outcome.explain()
    assert outcome.verdict.stale_writes == []
