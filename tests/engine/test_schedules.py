"""Pure tests of schedule rules: parsing, interval grids, cron fires across DST, fire keys.

The DST goldens are acceptance tests; the hypothesis properties check the same policy
against a brute-force, minute-by-minute reading of it. No I/O and no clock.
"""

import functools
import itertools
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from laneway.engine.schedules import (
    UTC_ZONES,
    Recurrence,
    check_zone_name,
    fire_key,
    parse_every,
    parse_recurrence,
)
from laneway.errors import InvalidInputError

NEW_YORK = "America/New_York"
BERLIN = "Europe/Berlin"
LORD_HOWE = "Australia/Lord_Howe"
CHATHAM = "Pacific/Chatham"
ZONES = ("UTC", NEW_YORK, BERLIN, LORD_HOWE, CHATHAM)
ONE_MINUTE = timedelta(minutes=1)

# database=None keeps hypothesis from writing its example database: these tests do no I/O.
PROPERTY_SETTINGS = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, us: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, us, tzinfo=UTC)


def cron_in(zone: str, expression: str) -> Recurrence:
    return parse_recurrence(every=None, cron=expression, timezone=zone)


def fires_after(recurrence: Recurrence, after: datetime, count: int) -> list[datetime]:
    fires: list[datetime] = []
    for _ in range(count):
        after = recurrence.next_fire_after(after)
        fires.append(after)
    return fires


def local(instant: datetime, zone: str) -> datetime:
    return instant.astimezone(ZoneInfo(zone))


# --- cron across DST: goldens -------------------------------------------------------------


@pytest.mark.parametrize("expression", ["0,30 2 * * *", "0 2,3 * * *"])
def test_cron_fires_once_at_gap_end_when_several_wall_times_fall_in_one_gap(
    expression: str,
) -> None:
    fires = fires_after(cron_in(BERLIN, expression), utc(2026, 3, 28, 3), 2)

    assert fires[0] == utc(2026, 3, 29, 1)  # 03:00 CEST: 02:00 and 02:30 (or 03:00), once
    assert local(fires[1], BERLIN).date() == date(2026, 3, 30)


def test_cron_fires_once_at_first_valid_time_when_wall_time_falls_in_spring_gap() -> None:
    nightly = cron_in(NEW_YORK, "30 2 * * *")

    fires = fires_after(nightly, utc(2026, 3, 6, 12), 4)

    assert fires == [
        utc(2026, 3, 7, 7, 30),  # 02:30 EST
        utc(2026, 3, 8, 7, 0),  # 02:30 does not exist: 03:00 EDT, the first valid time
        utc(2026, 3, 9, 6, 30),  # 02:30 EDT
        utc(2026, 3, 10, 6, 30),
    ]


def test_cron_fires_once_at_first_occurrence_when_wall_time_repeats_in_fall_back() -> None:
    nightly = cron_in(NEW_YORK, "30 1 * * *")

    fires = fires_after(nightly, utc(2026, 10, 30, 12), 3)

    assert fires == [
        utc(2026, 10, 31, 5, 30),  # 01:30 EDT
        utc(2026, 11, 1, 5, 30),  # 01:30 EDT, the first of two 01:30s; 01:30 EST does not fire
        utc(2026, 11, 2, 6, 30),  # 01:30 EST
    ]


@pytest.mark.parametrize(
    "after",
    [
        utc(2026, 11, 1, 5, 30),  # the fire itself
        utc(2026, 11, 1, 6, 15),  # 01:15 EST, inside the repeated hour, before the second 01:30
        utc(2026, 11, 1, 6, 30),  # 01:30 EST, the second 01:30
    ],
)
def test_cron_skips_second_occurrence_when_after_is_in_repeated_hour(after: datetime) -> None:
    nightly = cron_in(NEW_YORK, "30 1 * * *")

    assert nightly.next_fire_after(after) == utc(2026, 11, 2, 6, 30)


def test_hourly_cron_fires_every_utc_hour_when_clocks_fall_back() -> None:
    hourly = cron_in(NEW_YORK, "0 * * * *")

    fires = fires_after(hourly, utc(2026, 11, 1, 3, 30), 6)

    # Wildcard hour: both 01:00s are real instants and both fire, one UTC hour apart.
    assert fires == [utc(2026, 11, 1, hour) for hour in range(4, 10)]
    assert [local(fire, NEW_YORK).hour for fire in fires] == [0, 1, 1, 2, 3, 4]


def test_hourly_cron_fires_every_utc_hour_when_clocks_spring_forward() -> None:
    hourly = cron_in(NEW_YORK, "0 * * * *")

    fires = fires_after(hourly, utc(2026, 3, 8, 4, 30), 4)

    # Local 02:00 does not exist; 01:00 EST and 03:00 EDT are one UTC hour apart.
    assert fires == [utc(2026, 3, 8, hour) for hour in range(5, 9)]
    assert [local(fire, NEW_YORK).hour for fire in fires] == [0, 1, 3, 4]


def test_hourly_cron_fires_only_at_local_minute_zero_when_lord_howe_shifts_half_an_hour() -> None:
    hourly = cron_in(LORD_HOWE, "0 * * * *")

    fires = fires_after(hourly, utc(2019, 10, 5, 12), 6)

    # 2019-10-06 02:00 +10:30 became 02:30 +11:00. Local 02:00 never happens, so it never
    # fires: 01:00 and 03:00 local are 90 minutes apart.
    assert fires == [
        utc(2019, 10, 5, 12, 30),
        utc(2019, 10, 5, 13, 30),
        utc(2019, 10, 5, 14, 30),
        utc(2019, 10, 5, 16, 0),
        utc(2019, 10, 5, 17, 0),
        utc(2019, 10, 5, 18, 0),
    ]
    assert all(later > earlier for earlier, later in itertools.pairwise(fires))
    assert [local(fire, LORD_HOWE).hour for fire in fires] == [23, 0, 1, 3, 4, 5]
    assert {local(fire, LORD_HOWE).minute for fire in fires} == {0}


def test_six_hourly_cron_keeps_morning_fire_when_lord_howe_shifts_half_an_hour() -> None:
    # cronsim 2.8 on its own skips 06:00 here: its zone arithmetic lands on :30 after the shift.
    six_hourly = cron_in(LORD_HOWE, "0 */6 * * *")

    fires = fires_after(six_hourly, utc(2019, 10, 5, 12), 4)

    assert [local(fire, LORD_HOWE).hour for fire in fires] == [0, 6, 12, 18]
    assert fires[1] == utc(2019, 10, 5, 19)


def test_fixed_time_cron_fires_at_gap_end_when_lord_howe_skips_half_an_hour() -> None:
    nightly = cron_in(LORD_HOWE, "0 2 * * *")

    fires = fires_after(nightly, utc(2019, 10, 4, 12), 3)

    assert fires == [
        utc(2019, 10, 4, 15, 30),  # 02:00 +10:30
        utc(2019, 10, 5, 15, 30),  # 02:00 does not exist: 02:30 +11:00
        utc(2019, 10, 6, 15, 0),  # 02:00 +11:00
    ]


def test_fixed_time_cron_fires_at_gap_end_when_chatham_skips_an_hour() -> None:
    nightly = cron_in(CHATHAM, "0 3 * * *")

    fires = fires_after(nightly, utc(2019, 9, 27), 3)

    assert [local(fire, CHATHAM).isoformat() for fire in fires] == [
        "2019-09-28T03:00:00+12:45",
        "2019-09-29T03:45:00+13:45",  # 02:45-03:45 does not exist
        "2019-09-30T03:00:00+13:45",
    ]


def test_weekly_cron_fires_on_dst_start_day_when_zone_is_berlin() -> None:
    sunday_noon = cron_in(BERLIN, "0 12 * * 0")

    fires = fires_after(sunday_noon, utc(2022, 3, 19), 3)

    assert fires == [
        utc(2022, 3, 20, 11),  # 12:00 CET
        utc(2022, 3, 27, 10),  # 12:00 CEST, the day clocks went forward
        utc(2022, 4, 3, 10),
    ]


def test_cron_fires_on_utc_wall_time_when_zone_is_utc() -> None:
    weekdays = cron_in("UTC", "15 9 * * MON-FRI")

    fires = fires_after(weekdays, utc(2026, 3, 6, 9, 15), 2)  # a Friday, at the fire time

    assert fires == [utc(2026, 3, 9, 9, 15), utc(2026, 3, 10, 9, 15)]


@pytest.mark.parametrize(
    ("alias", "expression"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@HOURLY", "0 * * * *"),
    ],
)
def test_alias_fires_like_its_expansion_when_given_in_any_case(alias: str, expression: str) -> None:
    start = utc(2026, 10, 31, 17, 45)

    aliased = fires_after(cron_in(BERLIN, alias), start, 3)

    assert aliased == fires_after(cron_in(BERLIN, expression), start, 3)


def test_next_fire_after_returns_utc_when_after_has_another_offset() -> None:
    nightly = cron_in(NEW_YORK, "30 2 * * *")
    after = datetime(2026, 3, 7, 1, 0, tzinfo=timezone(timedelta(hours=-5)))

    fire = nightly.next_fire_after(after)

    assert fire == utc(2026, 3, 7, 7, 30)
    assert fire.tzinfo is UTC


@pytest.mark.parametrize(
    "recurrence",
    [
        cron_in("UTC", "* * * * *"),
        Recurrence(every=timedelta(minutes=5), cron=None, timezone="UTC"),
    ],
)
def test_next_fire_after_raises_when_after_is_naive(recurrence: Recurrence) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        recurrence.next_fire_after(datetime(2026, 1, 1))


# --- intervals ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("every", "after", "expected"),
    [
        ("5m", utc(2026, 1, 1, 10, 2, 17), utc(2026, 1, 1, 10, 5)),
        ("5m", utc(2026, 1, 1, 10, 5), utc(2026, 1, 1, 10, 10)),  # on the grid: strictly after
        ("5m", utc(2026, 1, 1, 10, 4, 59, 999_999), utc(2026, 1, 1, 10, 5)),
        ("1h", utc(2026, 3, 8, 6, 59), utc(2026, 3, 8, 7)),
        ("30s", utc(2026, 1, 1, 0, 0, 30), utc(2026, 1, 1, 0, 1)),
        ("1d", utc(2026, 3, 8, 12), utc(2026, 3, 9)),  # midnight UTC, whatever the timezone
        ("7s", utc(1970, 1, 1, 0, 0, 6), utc(1970, 1, 1, 0, 0, 7)),  # counted from the epoch
        ("1h30m", utc(1970, 1, 1, 1), utc(1970, 1, 1, 1, 30)),
    ],
)
def test_interval_fires_on_epoch_grid_when_after_is_anywhere(
    every: str, after: datetime, expected: datetime
) -> None:
    recurrence = parse_recurrence(every=every, cron=None, timezone=NEW_YORK)

    assert recurrence.next_fire_after(after) == expected


@PROPERTY_SETTINGS
@given(
    seconds=st.integers(min_value=1, max_value=366 * 86_400),
    after=st.datetimes(min_value=datetime(2024, 1, 1), max_value=datetime(2030, 12, 31)),
)
def test_interval_fire_is_next_grid_point_when_interval_and_after_are_random(
    seconds: int, after: datetime
) -> None:
    every = timedelta(seconds=seconds)
    recurrence = Recurrence(every=every, cron=None, timezone="UTC")
    after_utc = after.replace(tzinfo=UTC)

    fire = recurrence.next_fire_after(after_utc)

    assert after_utc < fire <= after_utc + every
    assert (fire - datetime(1970, 1, 1, tzinfo=UTC)) % every == timedelta(0)
    assert recurrence.next_fire_after(fire - timedelta(microseconds=1)) == fire


# --- parsing --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("5m", timedelta(minutes=5)),
        ("1h", timedelta(hours=1)),
        ("2d", timedelta(days=2)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1d2h3m4s", timedelta(days=1, hours=2, minutes=3, seconds=4)),
        ("1s", timedelta(seconds=1)),
        ("1000ms", timedelta(seconds=1)),
        ("1m30s", timedelta(seconds=90)),
        ("366d", timedelta(days=366)),
        ("  5M ", timedelta(minutes=5)),
        ("1H30M", timedelta(hours=1, minutes=30)),
        ("90m", timedelta(minutes=90)),
    ],
)
def test_parse_every_returns_interval_when_text_is_well_formed(
    text: str, expected: timedelta
) -> None:
    assert parse_every(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "5",
        "5x",
        "m",
        "0s",
        "-5m",
        "+5m",
        "500ms",
        "1500ms",
        "400d",
        "366d1s",
        "1.5h",
        "30m1h",
        "1h 30m",
        "5m5m",
        "５m",
    ],
)
def test_parse_every_raises_when_text_is_malformed_or_out_of_range(text: str) -> None:
    with pytest.raises(InvalidInputError, match="invalid interval") as caught:
        parse_every(text)

    assert repr(text) in str(caught.value)


@PROPERTY_SETTINGS
@given(text=st.text(alphabet="0123456789dhmsDHMS.- +", max_size=20) | st.text(max_size=20))
def test_parse_every_raises_only_invalid_input_when_text_is_arbitrary(text: str) -> None:
    try:
        every = parse_every(text)
    except InvalidInputError:
        return
    assert timedelta(seconds=1) <= every <= timedelta(days=366)
    assert every % timedelta(seconds=1) == timedelta(0)


@pytest.mark.parametrize(
    ("every", "cron"),
    [(None, None), ("5m", "* * * * *"), ("", "")],
)
def test_parse_recurrence_raises_when_not_exactly_one_rule_is_given(
    every: str | None, cron: str | None
) -> None:
    with pytest.raises(InvalidInputError, match="give exactly one of every or cron"):
        parse_recurrence(every=every, cron=cron)


def test_recurrence_raises_when_built_with_both_rules() -> None:
    with pytest.raises(InvalidInputError, match="give exactly one of every or cron"):
        Recurrence(every=timedelta(minutes=5), cron="* * * * *", timezone="UTC")


def test_parse_recurrence_keeps_timezone_when_rule_is_an_interval() -> None:
    recurrence = parse_recurrence(every="5m", cron=None, timezone=BERLIN)

    assert recurrence == Recurrence(every=timedelta(minutes=5), cron=None, timezone=BERLIN)


@pytest.mark.parametrize(
    ("cron", "expected"),
    [
        ("*/5 * * * *", "*/5 * * * *"),
        ("  0   9 * *  mon-fri ", "0 9 * * MON-FRI"),
        ("0 0 l * *", "0 0 L * *"),
        ("0 0 L * *", "0 0 L * *"),
        ("0 0 * * 5L", "0 0 * * 5L"),
        ("0 0 * * MON#2", "0 0 * * MON#2"),
        ("0 0 29 2 *", "0 0 29 2 *"),
        ("@daily", "@daily"),
        (" @Weekly ", "@weekly"),
        ("@MIDNIGHT", "@daily"),
        ("@annually", "@yearly"),
    ],
)
def test_parse_recurrence_normalizes_cron_when_expression_is_valid(
    cron: str, expected: str
) -> None:
    recurrence = parse_recurrence(every=None, cron=cron, timezone=NEW_YORK)

    assert recurrence == Recurrence(every=None, cron=expected, timezone=NEW_YORK)


@pytest.mark.parametrize(
    "cron",
    [
        "",
        "* * * *",
        "0 * * * * *",  # cronsim's seconds field is not standard cron
        "61 * * * *",
        "* 24 * * *",
        "* * 0 * *",
        "* * * 13 *",
        "* * * * 8",
        "*/0 * * * *",
        "5-1 * * * *",
        "0 0 30 2 *",
        "0 0 31 4,6 *",
        "one two three four five",
        "@reboot",
        "@every",
        "@daily 0",
    ],
)
def test_parse_recurrence_raises_when_cron_is_invalid(cron: str) -> None:
    with pytest.raises(InvalidInputError, match="invalid cron expression") as caught:
        parse_recurrence(every=None, cron=cron)

    assert repr(cron) in str(caught.value)


def test_parse_recurrence_raises_when_cron_is_too_long() -> None:
    cron = "0 " + "1," * 100 + "2 * * *"

    with pytest.raises(InvalidInputError, match="longer than 200 characters"):
        parse_recurrence(every=None, cron=cron)


@PROPERTY_SETTINGS
@given(cron=st.text(alphabet="0123456789*/,-#LW@ MONFRIJANdaily", max_size=24))
def test_parse_recurrence_raises_only_invalid_input_when_cron_is_arbitrary(cron: str) -> None:
    try:
        recurrence = parse_recurrence(every=None, cron=cron, timezone=NEW_YORK)
    except InvalidInputError:
        return
    after = utc(2026, 1, 1)
    assert recurrence.next_fire_after(after) > after


@pytest.mark.parametrize(
    "zone", ["", "Mars/Olympus_Mons", "America", "../etc/passwd", "/etc/passwd", "UTC ", "x" * 300]
)
def test_parse_recurrence_raises_when_timezone_is_unknown(zone: str) -> None:
    with pytest.raises(InvalidInputError, match="invalid timezone"):
        parse_recurrence(every=None, cron="0 * * * *", timezone=zone)

    with pytest.raises(InvalidInputError, match="invalid timezone"):
        parse_recurrence(every="5m", cron=None, timezone=zone)


@pytest.mark.parametrize(
    "zone",
    ["localtime", "posixrules", "Factory", "right/UTC", "posix/Europe/Berlin", "Mars/Olympus"],
)
def test_check_zone_name_raises_when_name_is_not_an_iana_zone(zone: str) -> None:
    # An outside audit: these opened with ZoneInfo (most of them), so a new schedule took them,
    # and what `localtime` and `posixrules` mean is the host's.
    with pytest.raises(InvalidInputError, match=f"invalid timezone '{zone}': expected an IANA"):
        check_zone_name(zone)


def test_parse_recurrence_still_reads_a_zone_a_release_before_stored() -> None:
    recurrence = parse_recurrence(every=None, cron="0 9 * * *", timezone="Factory")

    assert recurrence.next_fire_after(utc(2026, 1, 1)) == utc(2026, 1, 1, 9)


@pytest.mark.parametrize("zone", ["UTC", "Etc/UTC", "GMT", NEW_YORK, "US/Eastern", CHATHAM])
def test_check_zone_name_accepts_iana_zones_and_their_links(zone: str) -> None:
    check_zone_name(zone)


@pytest.mark.parametrize("zone", sorted(UTC_ZONES))
def test_utc_zones_are_iana_zones_with_offset_zero_at_every_instant(zone: str) -> None:
    check_zone_name(zone)
    offsets = {
        datetime(year, month, 1, tzinfo=UTC).astimezone(ZoneInfo(zone)).utcoffset()
        for year in range(1800, 2200)
        for month in (1, 4, 7, 10)
    }

    assert offsets == {timedelta(0)}


# --- fire keys ------------------------------------------------------------------------------


def test_fire_key_uses_utc_iso_time_when_fire_is_computed() -> None:
    fire_at = cron_in(NEW_YORK, "30 2 * * *").next_fire_after(utc(2026, 3, 8))

    assert fire_key("nightly", fire_at) == "schedule:nightly:2026-03-08T07:00:00Z"


def test_fire_key_converts_to_utc_when_fire_at_has_another_offset() -> None:
    fire_at = datetime(2026, 3, 8, 3, 0, tzinfo=ZoneInfo(NEW_YORK))

    assert fire_key("nightly", fire_at) == "schedule:nightly:2026-03-08T07:00:00Z"


def test_fire_key_keeps_microseconds_when_fire_at_has_them() -> None:
    fire_at = utc(2026, 3, 8, 7, 0, 0, 250_000)

    assert fire_key("n", fire_at) == "schedule:n:2026-03-08T07:00:00.250000Z"


def test_fire_key_raises_when_fire_at_is_naive() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        fire_key("nightly", datetime(2026, 3, 8, 7))


# --- cron properties ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CronCase:
    """A cron expression built from fields whose matching values are known."""

    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    weekdays: frozenset[int]  # cron numbering: 0 is Sunday

    @property
    def is_fixed_time(self) -> bool:
        minute, hour = self.expression.split()[:2]
        return not minute.startswith("*") and not hour.startswith("*")

    def matches(self, wall_time: datetime) -> bool:
        return (
            wall_time.minute in self.minutes
            and wall_time.hour in self.hours
            and (wall_time.weekday() + 1) % 7 in self.weekdays
        )


def field(text: str, values: range | list[int]) -> tuple[str, frozenset[int]]:
    return text, frozenset(values)


MINUTE_FIELDS = [
    field("0", [0]),
    field("30", [30]),
    field("45", [45]),
    field("5,35", [5, 35]),
    field("*/15", range(0, 60, 15)),
    field("*/20", range(0, 60, 20)),
    field("10-12", [10, 11, 12]),
]
HOUR_FIELDS = [
    field("*", range(24)),
    field("0", [0]),
    field("1", [1]),
    field("2", [2]),
    field("3", [3]),
    field("12", [12]),
    field("1-3", [1, 2, 3]),
    field("*/6", range(0, 24, 6)),
    field("*/5", range(0, 24, 5)),
    field("2,23", [2, 23]),
]
WEEKDAY_FIELDS = [
    field("*", range(7)),
    field("0", [0]),
    field("1-5", range(1, 6)),
    field("6", [6]),
]


@st.composite
def cron_cases(draw: st.DrawFn) -> CronCase:
    minute, minutes = draw(st.sampled_from(MINUTE_FIELDS))
    hour, hours = draw(st.sampled_from(HOUR_FIELDS))
    weekday, weekdays = draw(st.sampled_from(WEEKDAY_FIELDS))
    return CronCase(
        expression=f"{minute} {hour} * * {weekday}",
        minutes=minutes,
        hours=hours,
        weekdays=weekdays,
    )


def utc_offset(instant: datetime, zone: ZoneInfo) -> timedelta:
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


@functools.cache
def offset_changes(zone_name: str) -> tuple[datetime, ...]:
    """The instants, to the minute, at which the zone's UTC offset changed in 2024-2030."""
    zone = ZoneInfo(zone_name)
    changes: list[datetime] = []
    day = utc(2024, 1, 1)
    while day < utc(2031, 1, 1):
        if utc_offset(day, zone) != utc_offset(day + timedelta(days=1), zone):
            minute = day
            while utc_offset(minute, zone) == utc_offset(day, zone):
                minute += ONE_MINUTE
            changes.append(minute)
        day += timedelta(days=1)
    return tuple(changes)


uniform_instants = st.datetimes(
    min_value=datetime(2024, 1, 1), max_value=datetime(2030, 12, 31)
).map(lambda naive: naive.replace(tzinfo=UTC))


@st.composite
def starts_in(draw: st.DrawFn, zone: str) -> datetime:
    """An instant in 2024-2030, most often within a day before one of the zone's DST changes."""
    changes = offset_changes(zone)
    if not changes or draw(st.integers(min_value=0, max_value=4)) == 0:
        return draw(uniform_instants)
    change = draw(st.sampled_from(changes))
    seconds_before = draw(st.integers(min_value=-3 * 3600, max_value=26 * 3600))
    return change - timedelta(seconds=seconds_before)


def is_gap_end(instant: datetime, zone: ZoneInfo) -> bool:
    return utc_offset(instant - timedelta(seconds=1), zone) < utc_offset(instant, zone)


@PROPERTY_SETTINGS
@given(case=cron_cases(), zone=st.sampled_from(ZONES), data=st.data())
def test_cron_fires_strictly_increase_when_next_fire_after_is_chained(
    case: CronCase, zone: str, data: st.DataObject
) -> None:
    recurrence = cron_in(zone, case.expression)
    tz = ZoneInfo(zone)
    start = data.draw(starts_in(zone))

    fires = fires_after(recurrence, start, 12)

    assert all(fire.tzinfo is UTC for fire in fires)
    assert [start, *fires] == sorted({start, *fires})  # strictly increasing: no instant twice
    for fire in fires:
        assert case.matches(local(fire, zone).replace(tzinfo=None)) or (
            case.is_fixed_time and is_gap_end(fire, tz)
        )
    # Any instant between two fires leads to the later one: no fire lies in between.
    for earlier, later in itertools.pairwise([start, *fires]):
        between = earlier + (later - earlier) * data.draw(st.floats(min_value=0, max_value=0.999))
        assert recurrence.next_fire_after(between) == later


def expected_fires(case: CronCase, zone: str, start: datetime, end: datetime) -> list[datetime]:
    """Fires in (start, end], found by trying every minute of the window against the policy."""
    tz = ZoneInfo(zone)
    fires: set[datetime] = set()
    if case.is_fixed_time:
        # Every matching local wall time fires once: at its first occurrence, or, if it
        # does not exist, at the first local minute after it that does.
        def exists(wall_time: datetime) -> bool:
            aware = wall_time.replace(tzinfo=tz)
            return aware.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == wall_time

        wall_time = local(start, zone).replace(tzinfo=None, second=0, microsecond=0)
        wall_time -= timedelta(hours=3)
        while wall_time <= local(end, zone).replace(tzinfo=None) + timedelta(hours=3):
            if case.matches(wall_time):
                fire_wall_time = wall_time
                while not exists(fire_wall_time):
                    fire_wall_time += ONE_MINUTE
                fires.add(fire_wall_time.replace(tzinfo=tz, fold=0).astimezone(UTC))
            wall_time += ONE_MINUTE
    else:
        # Every real instant whose local wall time matches fires.
        instant = start.replace(second=0, microsecond=0)
        while instant <= end:
            if case.matches(local(instant, zone).replace(tzinfo=None)):
                fires.add(instant)
            instant += ONE_MINUTE
    return sorted(fire for fire in fires if start < fire <= end)


@settings(PROPERTY_SETTINGS, max_examples=80)
@given(case=cron_cases(), zone=st.sampled_from(ZONES), data=st.data())
def test_cron_fires_match_brute_force_when_window_spans_a_dst_change(
    case: CronCase, zone: str, data: st.DataObject
) -> None:
    recurrence = cron_in(zone, case.expression)
    start = data.draw(starts_in(zone))
    end = start + timedelta(hours=30)

    fires: list[datetime] = []
    fire = recurrence.next_fire_after(start)
    while fire <= end:
        fires.append(fire)
        fire = recurrence.next_fire_after(fire)

    assert fires == expected_fires(case, zone, start, end)


@settings(PROPERTY_SETTINGS, max_examples=20)
@given(
    minute=st.integers(min_value=0, max_value=59),
    hour=st.sampled_from([1, 2, 3]) | st.integers(min_value=0, max_value=23),
    zone=st.sampled_from([NEW_YORK, BERLIN, LORD_HOWE, CHATHAM]),
    year=st.integers(min_value=2024, max_value=2029),
)
def test_daily_cron_fires_once_per_local_day_when_year_has_dst_changes(
    minute: int, hour: int, zone: str, year: int
) -> None:
    daily = cron_in(zone, f"{minute} {hour} * * *")
    first_day, last_day = date(year, 1, 1), date(year, 12, 31)
    start = datetime.combine(first_day, datetime.min.time(), ZoneInfo(zone)) - ONE_MINUTE

    days: Counter[date] = Counter()
    fire = daily.next_fire_after(start)
    while local(fire, zone).date() <= last_day:
        days[local(fire, zone).date()] += 1
        fire = daily.next_fire_after(fire)

    assert set(days.values()) == {1}
    assert len(days) == (last_day - first_day).days + 1


def test_property_zones_change_offset_when_checked_for_2024_to_2030() -> None:
    assert offset_changes("UTC") == ()
    for zone in (NEW_YORK, BERLIN, LORD_HOWE, CHATHAM):
        assert len(offset_changes(zone)) == 14  # two a year, so the windows above see DST
