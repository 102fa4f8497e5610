"""The targets of issue #22 as bench/compare.py reports them: one row per workload of the
issue's table, with this run's measured ratio (from the medians), the target and a verdict.

Owns which figures each target compares and how a verdict is reached; not the measuring
(compare.py and bench/runners/) nor the table layout (tables.py). A figure this run did not
take (a contestant left out, a phase that failed) reads "not measured"; nothing here raises.

Retention is measured by bench/retention.py (compare.py runs it after the rounds): its result
is read from RETENTION_RESULT (or --retention-result), a JSON object {"measured": "<text>",
"met": true or false, ...}; without the file the row reads "not measured".
"""

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

Medians = Callable[[str, str], float | None]
"""(figure key, row label) -> the median over the rounds, None if not measured."""

HEADER = ["workload (issue #22)", "measured, this run", "target", "verdict"]
NOT_MEASURED = "not measured"
RETENTION_RESULT = Path(__file__).resolve().parent / "results" / "retention.json"


@dataclass(frozen=True, slots=True)
class Ratio:
    """`ours` ÷ `theirs` on one figure (rows named by a contestant key, or a system name)."""

    workload: str
    figure: str
    ours: str
    theirs: str
    goal: float
    theirs_figure: str | None = None  # when the denominator is another figure


RATIOS = [
    Ratio(
        "1-step, 10 in flight, vs PgQueuer with the same cap",
        "processed",
        "laneway-1-c10",
        "pgqueuer-c10",
        1.5,
    ),
    Ratio(
        "1-step, uncapped (concurrency 100), vs PgQueuer defaults",
        "processed",
        "laneway-1",
        "pgqueuer",
        2.0,
    ),
    Ratio(
        "3-step vs 1-step of Laneway, same cap (10)",
        "processed",
        "laneway-3-c10",
        "laneway-1-c10",
        0.8,
    ),
    Ratio(
        "template of 3 stages × 1 operation vs 3-step handler map",
        "processed",
        "laneway-template-3x1",
        "laneway-3",
        0.8,
    ),
    Ratio(
        "template, one stage of 3 parallel operations vs 1-step",
        "processed",
        "laneway-template-par3",
        "laneway-1",
        0.6,
    ),
    Ratio(
        "batch enqueue (1000 a call) vs PgQueuer batch", "enqueue_batch", "Laneway", "PgQueuer", 1.0
    ),
]
GRAPHQL = Ratio(
    "`enqueueWorkflows` of 1,000 over HTTP vs the Python API's batch rate",
    "enqueue_graphql",
    "Laneway",
    "Laneway",
    0.5,
    theirs_figure="enqueue_batch",
)
LATENCY = "idle enqueue → start, Laneway 1-step"
P50_GOAL, P99_GOAL = 2.0, 5.0
RETENTION = "retention of 10 M events (finished instances older than the limit)"
RETENTION_GOAL = "partition drop, O(partitions), no long lock, no bloat"


def ratio_row(
    target: Ratio, median: Medians, label: Callable[[str], str], missing: Mapping[str, str]
) -> list[str]:
    goal = f"≥ {target.goal:g}×"
    why = missing.get(target.figure)
    if why is not None:
        return [target.workload, f"missing: {why}", goal, "missing"]
    ours = median(target.figure, label(target.ours))
    theirs = median(target.theirs_figure or target.figure, label(target.theirs))
    if ours is None or not theirs:
        return [target.workload, NOT_MEASURED, goal, NOT_MEASURED]
    value = ours / theirs
    measured = f"{value:.2f}× ({ours:,.0f} ÷ {theirs:,.0f} /s)"
    return [target.workload, measured, goal, "met" if value >= target.goal else "not met"]


def latency_row(median: Medians, one_step: str) -> list[str]:
    goal = f"p50 ≤ {P50_GOAL:g} ms, p99 ≤ {P99_GOAL:g} ms"
    p50, p99 = median("p50", one_step), median("p99", one_step)
    if p50 is None or p99 is None:
        return [LATENCY, NOT_MEASURED, goal, NOT_MEASURED]
    met = p50 <= P50_GOAL and p99 <= P99_GOAL
    return [LATENCY, f"p50 {p50:.1f} ms, p99 {p99:.1f} ms", goal, "met" if met else "not met"]


def retention_row(path: Path) -> list[str]:
    """The retention script's result, when it left one at `path`."""
    try:
        result = json.loads(path.read_text())
    except FileNotFoundError:
        return [RETENTION, NOT_MEASURED, RETENTION_GOAL, NOT_MEASURED]
    except (OSError, ValueError) as error:
        return [
            RETENTION,
            f"{NOT_MEASURED} ({path.name} unreadable: {error})"[:160],
            RETENTION_GOAL,
            NOT_MEASURED,
        ]
    measured = result.get("measured") if isinstance(result, dict) else None
    met = result.get("met") if isinstance(result, dict) else None
    if not isinstance(measured, str) or not isinstance(met, bool):
        return [
            RETENTION,
            f"{NOT_MEASURED} ({path.name} lacks measured/met)",
            RETENTION_GOAL,
            NOT_MEASURED,
        ]
    return [
        RETENTION,
        f"{measured} (from {path.name})",
        RETENTION_GOAL,
        "met" if met else "not met",
    ]


def target_rows(
    median: Medians,
    label: Callable[[str], str],
    missing: Mapping[str, str],
    retention: Path = RETENTION_RESULT,
) -> list[list[str]]:
    """Every row of the table, in the issue's order. `label` turns a contestant key into its
    row label (a system name is returned as it is); `missing` names figures that could not
    be taken at all, and why."""
    lines = [ratio_row(target, median, label, missing) for target in RATIOS]
    lines.append(latency_row(median, label("laneway-1")))
    lines.append(ratio_row(GRAPHQL, median, label, missing))
    lines.append(retention_row(retention))
    return lines
