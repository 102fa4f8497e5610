"""R-06 (PR tier): an instance whose step kills its worker is dead-lettered after the recovery cap.

tests/e2e/test_workers.py shows a poison instance running out of attempts; this is the
recovery cap (LANEWAY_MAX_RECOVERIES, 3) while ordinary instances keep completing around it.
The lease is the plan's fast-tier 3 s: each death must leave time to boot a replacement.
"""

from pathlib import Path

import pytest

from tests.chaos.crashes import COLLATERAL, r06_poison
from tests.chaos.harness import RunConfig

pytestmark = pytest.mark.e2e


async def test_r06_a_poison_instance_is_dead_lettered_once_while_the_others_complete(
    database_url: str, tmp_path: Path
) -> None:
    config = RunConfig(workers=3, lease_seconds=3.0, poll_seconds=0.2)
    outcome = await r06_poison(database_url, tmp_path, config, others=150, rate_per_second=10)
    verdict = outcome.verdict
    assert all(outcome.checks.values()), outcome.explain()
    others = [
        verdict.lost,
        verdict.unexpected,
        verdict.double_terminal,
        verdict.stale_writes,
        verdict.unexplained_duplicates,
        verdict.duplicate_checkpoints,
        verdict.premature,
        verdict.late,
    ]
    assert not any(others), outcome.explain()
    # Every other instance completed: from its second loss the poison runs alone (its checks
    # say no other instance was lost with it then), so none reaches the cap with it.
    assert not verdict.wrong_result, outcome.explain()
    assert int(outcome.figures[COLLATERAL]) == 0, outcome.explain()
    assert outcome.passed, outcome.explain()
