"""C-01 (docs/reliability.md): cron fires checked against a brute-force oracle; and C-02,
golden DST cases that tests/engine/test_schedules.py does not already pin.

C-01 draws random expressions (lists, ranges, steps, names, `L`, `LW`, `#`) in seven zones
that stress DST in every way (30-minute shifts, midnight shifts, +12:45, no DST), from start
instants across 2024–2030, most of them just before one of the zone's offset changes. The
PR tier runs 2,000 cases; LANEWAY_CHAOS_FULL=1 runs 20,000. Our API has no `prev()`, so the
"prev(next(t)) ≤ t" check becomes: the fires in a window equal every fire the brute-force
oracle finds there, so no matching wall time between two consecutive fires was skipped.
"""

import functools
import itertools
import os
from collections import Counter
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, event, given, reject, settings
from hypothesis import strategies as st

from laneway.engine.schedules import Recurrence
from laneway.errors import InvalidInputError
from tests.engine.test_schedules import cron_in, fires_after, utc
from tests.reliability.cron_model import (
    CRON_CASES,
    CronCase,
    expected_fires,
    instants_of,
    is_gap_end,
    wall_time,
)

ZONES = (
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",  # 30-minute DST
    "America/Santiago",  # changes at local midnight
    "Pacific/Apia",  # skipped 2011-12-30; no DST since 2021
    "Pacific/Chatham",  # +12:45 / +13:45
)
MAX_FIRES = 30
MAX_SPAN = timedelta(days=2 * 366)

# database=None: a reliability run must not replay examples saved by an earlier run.
settings.register_profile(
    "laneway-cron-pr",
    max_examples=2_000,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
settings.register_profile(
    "laneway-cron-full",
    parent=settings.get_profile("laneway-cron-pr"),
    max_examples=20_000,
)
CRON_SETTINGS = settings.get_profile(
    "laneway-cron-full" if os.environ.get("LANEWAY_CHAOS_FULL") == "1" else "laneway-cron-pr"
)


def local_iso(instants: list[datetime], zone: str) -> list[str]:
    return [instant.astimezone(ZoneInfo(zone)).isoformat() for instant in instants]


# -- C-01 ----------------------------------------------------------------------------------------


@functools.cache
def offset_changes(zone_name: str) -> tuple[datetime, ...]:
    """The instants, to the minute, at which the zone's UTC offset changed in 2024–2030."""
    zone = ZoneInfo(zone_name)
    changes: list[datetime] = []
    day = utc(2024, 1, 1)
    while day < utc(2031, 1, 1):
        if (
            day.astimezone(zone).utcoffset()
            != (day + timedelta(days=1)).astimezone(zone).utcoffset()
        ):
            minute = day
            while minute.astimezone(zone).utcoffset() == day.astimezone(zone).utcoffset():
                minute += timedelta(minutes=1)
            changes.append(minute)
        day += timedelta(days=1)
    return tuple(changes)


def starts_in(zone: str) -> st.SearchStrategy[datetime]:
    """Instants in 2024–2030; most near one of the zone's offset changes."""
    anywhere = st.datetimes(min_value=datetime(2024, 1, 1), max_value=datetime(2030, 12, 31)).map(
        lambda naive: naive.replace(tzinfo=UTC)
    )
    changes = offset_changes(zone)
    if not changes:
        return anywhere
    # Seconds before the change. Dense expressions reach only half an hour in MAX_FIRES fires,
    # sparse ones days; a start just after a change lands inside a repeated hour.
    minutes = st.integers(-1_800, 1_500) | st.integers(0, 1_500) | st.integers(0, 5_400)
    before = minutes | st.integers(0, 93_600)
    near = st.builds(
        lambda change, seconds, us: change - timedelta(seconds=seconds, microseconds=us),
        st.sampled_from(changes),
        before,
        st.integers(0, 999_999),
    )
    return st.one_of(near, anywhere)


# Built once: strategies built inside a test cost more than the test itself.
ZONE_STARTS = st.one_of([st.tuples(st.just(zone), starts_in(zone)) for zone in ZONES])
# Up to three (pair index, microsecond offset) picks, reduced modulo the fires drawn.
PICKS = st.lists(st.tuples(st.integers(0, 2**16), st.integers(0, 2**48)), max_size=3)


def fires_from(recurrence: Recurrence, start: datetime) -> list[datetime]:
    """MAX_FIRES consecutive fires, or as many as come within MAX_SPAN (at least one)."""
    fires = [recurrence.next_fire_after(start)]
    while len(fires) < MAX_FIRES and fires[-1] - start <= MAX_SPAN:
        fires.append(recurrence.next_fire_after(fires[-1]))
    return fires


def matches_by_policy(case: CronCase, fire: datetime, zone: ZoneInfo) -> bool:
    """The fire's wall time matches, or it ends a gap that swallowed a matching wall time."""
    if case.matches(wall_time(fire, zone)):
        return True
    if not (case.is_fixed_time and is_gap_end(fire, zone)):
        return False
    before_gap = wall_time(fire - timedelta(seconds=1), zone)
    skipped = wall_time(fire, zone) - timedelta(minutes=1)
    while skipped > before_gap:
        if case.matches(skipped) and not instants_of(skipped, zone):
            return True
        skipped -= timedelta(minutes=1)
    return False


@CRON_SETTINGS
@given(case=CRON_CASES, zone_start=ZONE_STARTS, picks=PICKS)
def test_cron_fires_follow_the_dst_policy_when_expression_zone_and_start_are_random(
    case: CronCase, zone_start: tuple[str, datetime], picks: list[tuple[int, int]]
) -> None:
    zone_name, start = zone_start
    try:
        recurrence = cron_in(zone_name, case.expression)
    except InvalidInputError:
        reject()  # never fires (`0 0 30 2 *`): refused when the schedule is created
    zone = ZoneInfo(zone_name)

    fires = fires_from(recurrence, start)
    event("fixed-time" if case.is_fixed_time else "wildcard minute or hour")
    spans_change = any(start < change <= fires[-1] for change in offset_changes(zone_name))
    event("window spans an offset change" if spans_change else "window within one offset")

    assert all(fire.tzinfo is UTC for fire in fires)
    assert [start, *fires] == sorted({start, *fires}), "not strictly increasing"
    unmatched = [f for f in fires if not matches_by_policy(case, f, zone)]
    assert not unmatched, local_iso(unmatched, zone_name)
    expected = expected_fires(case, zone, start, fires[-1])
    assert local_iso(fires, zone_name) == local_iso(expected, zone_name)
    # Any instant from one fire up to the next leads to the next: nothing lies in between.
    pairs = list(itertools.pairwise([start, *fires]))
    for index, offset_us in picks:
        earlier, later = pairs[index % len(pairs)]
        offset = timedelta(
            microseconds=offset_us % ((later - earlier) // timedelta(microseconds=1))
        )
        assert recurrence.next_fire_after(earlier + offset) == later
    if case.is_daily:
        per_day = Counter(wall_time(fire, zone).date() for fire in fires)
        first, last = min(per_day), max(per_day)
        assert len(per_day) == (last - first).days + 1, "a local day without a fire"
        assert set(per_day.values()) == {1}, "a local day with two fires"


def test_stepped_range_of_one_value_fires_that_value_only_when_hypothesis_found_it() -> None:
    # C-01 found cronsim 2.8 reading `0-0/1` as `0/1`, every minute; schedules.py collapses it
    # (and then found the collapse must come before the never-fires check).
    hourly = cron_in("UTC", "0-0/1 * * * *")
    weekly = cron_in("Europe/Berlin", "30 9-9/2 * * MON-1/3")

    assert hourly.cron == "0 * * * *"
    # Collapsed, the day field no longer meets the last Sunday: refused, not a silent no-op.
    with pytest.raises(InvalidInputError, match="never fires"):
        cron_in("UTC", "0 0 */16,1-1/1 * 0L")
    assert fires_after(hourly, utc(2026, 1, 1), 3) == [utc(2026, 1, 1, h) for h in (1, 2, 3)]
    assert local_iso(fires_after(weekly, utc(2026, 1, 1), 2), "Europe/Berlin") == [
        "2026-01-05T09:30:00+01:00",
        "2026-01-12T09:30:00+01:00",
    ]


# -- C-02: the plan's golden cases that tests/engine/test_schedules.py does not pin ---------------


@pytest.mark.parametrize(
    ("zone", "expression", "after", "expected"),
    [
        pytest.param(
            "America/New_York",
            "30 2 * * *",
            utc(2026, 10, 31, 12),
            ["2026-11-01T02:30:00-05:00", "2026-11-02T02:30:00-05:00"],
            id="new-york-02:30-exists-once-on-fall-back-day",
        ),
        pytest.param(
            "America/New_York",
            "30 1 * * *",
            utc(2026, 3, 7, 12),
            ["2026-03-08T01:30:00-05:00", "2026-03-09T01:30:00-04:00"],
            id="new-york-01:30-before-the-spring-gap",
        ),
        pytest.param(
            "Europe/Berlin",
            "30 2 * * *",
            utc(2026, 10, 24, 12),
            ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"],
            id="berlin-repeated-02:30-fires-once-at-cest",
        ),
        pytest.param(
            "America/Santiago",
            "30 0 * * *",
            utc(2026, 9, 5),
            ["2026-09-05T00:30:00-04:00", "2026-09-06T01:00:00-03:00", "2026-09-07T00:30:00-03:00"],
            id="santiago-midnight-gap-fires-at-01:00",
        ),
        pytest.param(
            "America/Santiago",
            "30 23 * * *",
            utc(2026, 4, 4, 12),
            ["2026-04-04T23:30:00-03:00", "2026-04-05T23:30:00-04:00"],
            id="santiago-repeated-23:30-fires-once",
        ),
        pytest.param(
            "America/Santiago",
            "0 * * * *",
            utc(2026, 9, 6, 2),
            ["2026-09-05T23:00:00-04:00", "2026-09-06T01:00:00-03:00"],
            id="santiago-hourly-has-no-midnight-on-gap-day",
        ),
        pytest.param(
            "America/Santiago",
            "0 * * * *",
            utc(2026, 4, 5, 1, 30),
            ["2026-04-04T23:00:00-03:00", "2026-04-04T23:00:00-04:00", "2026-04-05T00:00:00-04:00"],
            id="santiago-hourly-fires-both-23:00s",
        ),
        pytest.param(
            "Pacific/Apia",
            "0 12 * * *",
            utc(2011, 12, 29, 12),
            ["2011-12-29T12:00:00-10:00", "2011-12-31T00:00:00+14:00", "2011-12-31T12:00:00+14:00"],
            id="apia-skipped-2011-12-30-fires-at-gap-end",
        ),
        pytest.param(
            "Pacific/Apia",
            "0 0 * * *",
            utc(2011, 12, 28, 12),
            ["2011-12-29T00:00:00-10:00", "2011-12-31T00:00:00+14:00", "2012-01-01T00:00:00+14:00"],
            id="apia-gap-end-and-next-midnight-are-one-fire",
        ),
        pytest.param(
            "Pacific/Apia",
            "0 * * * *",
            utc(2011, 12, 30, 8, 30),
            ["2011-12-29T23:00:00-10:00", "2011-12-31T00:00:00+14:00"],
            id="apia-hourly-steps-over-the-missing-day",
        ),
        pytest.param(
            "Australia/Lord_Howe",
            "0 * * * *",
            utc(2019, 4, 6, 13, 30),
            ["2019-04-07T01:00:00+11:00", "2019-04-07T02:00:00+10:30"],
            id="lord-howe-hourly-across-half-hour-fall-back",
        ),
        pytest.param(
            "Australia/Lord_Howe",
            "30 1 * * *",
            utc(2019, 4, 6, 12),
            ["2019-04-07T01:30:00+11:00", "2019-04-08T01:30:00+10:30"],
            id="lord-howe-repeated-01:30-fires-once",
        ),
        pytest.param(
            "Pacific/Chatham",
            "*/30 3 * * *",
            utc(2024, 4, 6, 13),
            [
                "2024-04-07T03:00:00+13:45",
                "2024-04-07T03:30:00+13:45",
                "2024-04-07T03:00:00+12:45",
                "2024-04-07T03:30:00+12:45",
            ],
            id="chatham-wildcard-minute-fires-in-both-passes",
        ),
        pytest.param(
            "Pacific/Chatham",
            "0 3 * * *",
            utc(2024, 4, 6, 13),
            ["2024-04-07T03:00:00+13:45", "2024-04-08T03:00:00+12:45"],
            id="chatham-fixed-time-fires-in-first-pass-only",
        ),
    ],
)
def test_cron_fires_at_golden_instants_when_clocks_change(
    zone: str, expression: str, after: datetime, expected: list[str]
) -> None:
    fires = fires_after(cron_in(zone, expression), after, len(expected))

    assert local_iso(fires, zone) == expected
