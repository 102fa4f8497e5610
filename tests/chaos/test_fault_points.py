"""R-05 (PR tier), runner points: a worker armed with a fault at a commit point of the runner.

One of three workers runs with LANEWAY_FAULTS set; load continues until the fault has fired
at least once (a death, or a lease lost to the injected connection error), then everything
must settle with I1–I4 intact and no step boundary checkpointed twice (the ambiguous commit).
The other points (release, pause, cancel, cron) are in test_fault_transitions.py.
"""

from pathlib import Path

import pytest

from tests.chaos.fault_points import r05_runner_points
from tests.chaos.harness import RunConfig

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    "spec",
    [
        "before_step=kill@0.1",
        "after_checkpoint_commit=kill@0.1",
        "after_checkpoint_commit=raise_conn_lost@0.1",
    ],
)
async def test_r05_invariants_hold_when_a_runner_commit_point_faults(
    spec: str, database_url: str, tmp_path: Path
) -> None:
    outcome = await r05_runner_points(database_url, tmp_path, RunConfig(), specs={0: spec})
    assert outcome.passed, outcome.explain()
    assert outcome.verdict.duplicate_checkpoints == set()
