"""Named fault points for the chaos tests (docs/reliability.md, "The harness"; DBOS-style triggers).

Owns the fault table of this process: which named point does what. The table comes from the
environment variable LANEWAY_FAULTS, read once at import (not through Settings: a fault is a
test-only switch that must be armed in any process, the chaos tier's client that builds an
Engine with no Settings too, and the hot path must cost one module attribute read when nothing
is armed). The engine calls

    if faults.ARMED:
        await faults.hit("before_step")

at each point. The spec is a comma-separated list of `point=action[@probability]`:

    LANEWAY_FAULTS="after_checkpoint_commit=raise_conn_lost@0.05,before_step=sleep:2"

Actions: `kill` (SIGKILL this process), `raise_conn_lost` (raise the error asyncpg raises when
the connection died under a query; after a commit that is the ambiguous commit), `sleep:N`
(asyncio.sleep N seconds). A malformed spec arms nothing and is kept, not raised, at import:
importing `laneway` (which `laneway --help` does) must not fail on it. `check` raises it as an
InvalidInputError naming LANEWAY_FAULTS; the CLI calls it beside Settings (one `laneway:` line,
exit 2) and every Engine on construction, so a process started with a malformed spec still
stops at start-up instead of running without its faults.
"""

import asyncio
import math
import os
import random
import signal
from collections.abc import Mapping
from dataclasses import dataclass

import asyncpg

from laneway.errors import InvalidInputError

POINTS = frozenset(
    {
        "before_step",
        "after_checkpoint_commit",
        "before_release",
        "pause_transition",
        "cancel_transition",
        "cron_insert",
    }
)
ACTIONS = ("kill", "raise_conn_lost", "sleep")


@dataclass(frozen=True, slots=True, kw_only=True)
class Fault:
    """What one point does when it is reached: `action`, with `probability` per visit."""

    point: str
    action: str
    seconds: float = 0.0
    probability: float = 1.0


def _probability(text: str, item: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"LANEWAY_FAULTS: bad probability in {item!r}") from None
    if not 0.0 < value <= 1.0:
        raise ValueError(f"LANEWAY_FAULTS: probability must be in (0, 1] in {item!r}")
    return value


def _fault(item: str) -> Fault:
    point, equals, rest = item.partition("=")
    point = point.strip()
    if not equals or not rest.strip():
        raise ValueError(f"LANEWAY_FAULTS: expected point=action[@p], got {item!r}")
    if point not in POINTS:
        raise ValueError(
            f"LANEWAY_FAULTS: unknown point {point!r} (known: {', '.join(sorted(POINTS))})"
        )
    action, at, chance = rest.strip().partition("@")
    probability = _probability(chance, item) if at else 1.0
    name, colon, argument = action.strip().partition(":")
    if name not in ACTIONS:
        raise ValueError(f"LANEWAY_FAULTS: unknown action {name!r} in {item!r}")
    if (name == "sleep") != bool(colon):
        raise ValueError(f"LANEWAY_FAULTS: only sleep takes an argument (sleep:N) in {item!r}")
    seconds = 0.0
    if name == "sleep":
        try:
            seconds = float(argument)
        except ValueError:
            raise ValueError(f"LANEWAY_FAULTS: bad sleep seconds in {item!r}") from None
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"LANEWAY_FAULTS: sleep seconds must be >= 0 in {item!r}")
    return Fault(point=point, action=name, seconds=seconds, probability=probability)


def parse(spec: str) -> dict[str, Fault]:
    """The fault table a LANEWAY_FAULTS value describes (empty for an empty spec).

    Raises:
        ValueError: an unknown point or action, a bad number, or a point named twice.
    """
    table: dict[str, Fault] = {}
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        fault = _fault(item)
        if fault.point in table:
            raise ValueError(f"LANEWAY_FAULTS: point {fault.point!r} is given twice")
        table[fault.point] = fault
    return table


def _from_environment(spec: str) -> tuple[Mapping[str, Fault], str | None]:
    """The table LANEWAY_FAULTS arms, or none and why the spec was refused."""
    try:
        return parse(spec), None
    except ValueError as exc:
        return {}, str(exc)


_table, _refusal = _from_environment(os.environ.get("LANEWAY_FAULTS", ""))
ARMED: bool = bool(_table)
"""True when any point is armed; the only thing the engine's hot path reads."""


def check() -> None:
    """Refuse to go on in a process whose LANEWAY_FAULTS was malformed at import.

    Raises:
        InvalidInputError: what was wrong with it, naming LANEWAY_FAULTS.
    """
    if _refusal is not None:
        raise InvalidInputError(_refusal)


def arm(spec: str) -> None:
    """Replace this process's fault table (tests that inject faults in-process).

    Raises:
        ValueError: `spec` is malformed (the table is left as it was).
    """
    global _table, _refusal, ARMED
    _table, _refusal = parse(spec), None
    ARMED = bool(_table)


def armed() -> Mapping[str, Fault]:
    return dict(_table)


async def hit(point: str) -> None:
    """Reach `point`: do its fault, if one is armed and the dice say so."""
    fault = _table.get(point)
    if fault is None or (fault.probability < 1.0 and random.random() >= fault.probability):
        return
    if fault.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault.action == "raise_conn_lost":
        raise asyncpg.ConnectionDoesNotExistError(f"fault injected at {point}: connection lost")
    else:
        await asyncio.sleep(fault.seconds)
