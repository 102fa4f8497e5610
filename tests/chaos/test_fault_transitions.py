"""R-05 (PR tier), transition points: release at shutdown, pause, cancel (API side) and cron fire.

Each test arms one point with `kill` and checks that no instance is lost, doubled, stale or
stuck afterwards. The runner's commit points are in test_fault_points.py.
"""

from pathlib import Path

import pytest

from tests.chaos.fault_points import (
    r05_cancel_point,
    r05_cron_point,
    r05_pause_point,
    r05_release_point,
)
from tests.chaos.harness import RunConfig

pytestmark = pytest.mark.e2e


async def test_r05_release_point_kill_leaves_leases_to_expire_and_be_recovered(
    database_url: str, tmp_path: Path
) -> None:
    config = RunConfig()
    outcome = await r05_release_point(database_url, tmp_path, config)
    assert outcome.passed, outcome.explain()
    # Nothing was handed back, so each held instance waited out its lease, within the bound.
    assert min(outcome.verdict.reclaim_seconds) >= config.lease_seconds


async def test_r05_pause_point_kill_still_pauses_each_instance_once_then_resumes(
    database_url: str, tmp_path: Path
) -> None:
    outcome = await r05_pause_point(database_url, tmp_path, RunConfig(), probability=0.3, batch=20)
    assert outcome.passed, outcome.explain()


async def test_r05_cancel_point_kill_after_commit_still_cancels_exactly_once(
    database_url: str, tmp_path: Path
) -> None:
    outcome = await r05_cancel_point(database_url, tmp_path, RunConfig(), cancels=3, others=20)
    assert outcome.passed, outcome.explain()


async def test_r05_cron_point_kill_after_a_fire_commit_repeats_no_fire(
    database_url: str, tmp_path: Path
) -> None:
    outcome = await r05_cron_point(database_url, tmp_path, RunConfig())
    assert outcome.passed, outcome.explain()
