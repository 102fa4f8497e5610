"""R-01 (PR tier): W3 instances on 3 supervised workers while busy workers are SIGKILLed.

Load runs at a steady rate until every kill is done. A kill waits until the replacement of
the previous victim is up (one worker down at a time, as with 4 workers and a kill every 4 s
in the plan) and until some progress was made since, then hits a worker holding instances.
"""

from pathlib import Path

import pytest

from tests.chaos.crashes import r01_kills
from tests.chaos.harness import RunConfig

pytestmark = pytest.mark.e2e


async def test_r01_nothing_is_lost_doubled_or_stale_when_workers_are_killed(
    database_url: str, tmp_path: Path
) -> None:
    config = RunConfig(workers=3, lease_seconds=2.0, poll_seconds=0.2)
    outcome = await r01_kills(
        database_url, tmp_path, config, kills=6, progress_between_kills=40, rate_per_second=40
    )
    assert outcome.passed, outcome.explain()
    assert len(outcome.verdict.ok) >= 200
    assert min(outcome.verdict.reclaim_seconds) >= config.lease_seconds
    assert max(outcome.verdict.reclaim_seconds) <= config.reclaim_max_seconds
