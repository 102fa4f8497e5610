"""R-04 (PR tier): SIGTERM under load hands unfinished instances over at once, not after the lease.

tests/e2e/test_workers.py already shows one idle release; this is the same under load, three
times, with the pick-up latency measured on the database clock. The lease is 30 s, so a
pick-up within a second can only come from the explicit release.
"""

from pathlib import Path

import pytest

from tests.chaos.crashes import r04_sigterms
from tests.chaos.harness import RunConfig

pytestmark = pytest.mark.e2e


async def test_r04_sigterm_hands_unfinished_instances_over_within_a_second_and_a_poll(
    database_url: str, tmp_path: Path
) -> None:
    config = RunConfig(workers=3, lease_seconds=30.0, poll_seconds=0.2)
    outcome = await r04_sigterms(database_url, tmp_path, config, terms=3, batch=30)
    assert outcome.passed, outcome.explain()
