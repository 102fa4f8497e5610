"""A second, independent reading of cron for the property tests: random expressions whose
matching wall times are known, and a brute-force oracle of when our DST policy fires them.

Shares no code with laneway/engine/schedules.py or cronsim: each field is generated together
with the values it matches, and the oracle walks every local day of a window and every
minute of each matching hour of a matching day, applying the policy written in the docstring
of `Recurrence`.
"""

import calendar
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from hypothesis import strategies as st

ONE_MINUTE = timedelta(minutes=1)
ONE_DAY = timedelta(days=1)
WALL_MARGIN = timedelta(hours=3)
MONTH_NAMES = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAY_NAMES = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]

DayRule = Callable[[date], bool]


@dataclass(frozen=True, slots=True, kw_only=True)
class CronField:
    """One field's text and the plain values it matches (days also carry special rules)."""

    text: str
    values: frozenset[int]
    rules: tuple[DayRule, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class CronCase:
    """A five-field expression with its meaning, read independently of any cron library."""

    minute: CronField
    hour: CronField
    day: CronField
    month: CronField
    weekday: CronField

    def __repr__(self) -> str:
        return f"CronCase({self.expression!r})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))  # hypothesis's printer would list every matching value

    @property
    def expression(self) -> str:
        fields = (self.minute, self.hour, self.day, self.month, self.weekday)
        return " ".join(f.text for f in fields)

    @property
    def is_fixed_time(self) -> bool:
        """The documented test: neither the minute nor the hour field starts with `*`."""
        return not self.minute.text.startswith("*") and not self.hour.text.startswith("*")

    @property
    def is_daily(self) -> bool:
        """One minute of one hour of every day."""
        return (
            len(self.minute.values) == 1
            and len(self.hour.values) == 1
            and self.is_fixed_time
            and self.day.text == self.month.text == self.weekday.text == "*"
        )

    def matches_day(self, day: date) -> bool:
        if day.month not in self.month.values:
            return False
        by_date = day.day in self.day.values or any(rule(day) for rule in self.day.rules)
        weekday = (day.weekday() + 1) % 7  # cron numbering: 0 (and 7) is Sunday
        by_weekday = weekday in self.weekday.values or any(rule(day) for rule in self.weekday.rules)
        # Vixie cron: when either day field starts with `*`, both must match; else either.
        if self.day.text.startswith("*") or self.weekday.text.startswith("*"):
            return by_date and by_weekday
        return by_date or by_weekday

    def matches(self, wall_time: datetime) -> bool:
        return (
            wall_time.minute in self.minute.values
            and wall_time.hour in self.hour.values
            and self.matches_day(wall_time.date())
        )

    def matching_wall_times(self, lower: datetime, upper: datetime) -> Iterator[datetime]:
        """Every matching local minute from `lower` to `upper`, minute by minute."""
        day = lower.date()
        while day <= upper.date():
            if self.matches_day(day):
                for hour in range(24):
                    if hour in self.hour.values:
                        for minute in range(60):
                            if minute in self.minute.values:
                                wall = datetime.combine(day, time(hour, minute))
                                if lower <= wall <= upper:
                                    yield wall
            day += ONE_DAY


# -- expected fires ------------------------------------------------------------------------------


def wall_time(instant: datetime, zone: ZoneInfo) -> datetime:
    return instant.astimezone(zone).replace(tzinfo=None)


def instants_of(wall: datetime, zone: ZoneInfo) -> list[datetime]:
    """The UTC instants showing `wall` on the zone's clock: none in a gap, two in a fold."""
    found = {wall.replace(tzinfo=zone, fold=fold).astimezone(UTC) for fold in (0, 1)}
    return sorted(i for i in found if wall_time(i, zone) == wall)


def expected_fires(
    case: CronCase, zone: ZoneInfo, start: datetime, end: datetime
) -> list[datetime]:
    """The fires in (start, end] by the documented policy, by brute force.

    Fixed-time expressions fire once per matching wall time: at its first occurrence or, when
    it does not exist, at the first existing local minute after it. Other expressions fire at
    every instant whose wall time matches.
    """
    # A wall time fires within a few hours of the instant it names: in 2024–2030 these zones
    # change offset by at most an hour, and a gap moves a fire by at most its length.
    lower = wall_time(start, zone) - WALL_MARGIN
    upper = wall_time(end, zone) + WALL_MARGIN
    fires: set[datetime] = set()
    for wall in case.matching_wall_times(lower, upper):
        if not case.is_fixed_time:
            fires.update(instants_of(wall, zone))
            continue
        shown = wall
        while not (occurrences := instants_of(shown, zone)):
            shown += ONE_MINUTE
        fires.add(occurrences[0])
    return sorted(fire for fire in fires if start < fire <= end)


def is_gap_end(instant: datetime, zone: ZoneInfo) -> bool:
    before = (instant - timedelta(seconds=1)).astimezone(zone).utcoffset()
    after = instant.astimezone(zone).utcoffset()
    assert before is not None
    assert after is not None
    return before < after


# -- generating expressions ----------------------------------------------------------------------


def _last_day(day: date) -> bool:
    return day.day == calendar.monthrange(day.year, day.month)[1]


def _last_weekday_of_month(day: date) -> bool:
    last = calendar.monthrange(day.year, day.month)[1]
    candidates = [
        d for d in range(last - 2, last + 1) if date(day.year, day.month, d).weekday() < 5
    ]
    return day.day == candidates[-1]


def _nth_weekday(weekday: int, nth: int) -> DayRule:
    return lambda day: (day.weekday() + 1) % 7 == weekday % 7 and (day.day - 1) // 7 + 1 == nth


def _last_weekday_named(weekday: int) -> DayRule:
    return lambda day: (
        (day.weekday() + 1) % 7 == weekday % 7
        and day.day + 7 > calendar.monthrange(day.year, day.month)[1]
    )


def _field(
    low: int, high: int, names: list[str] | None = None, specials: tuple[CronField, ...] = ()
) -> st.SearchStrategy[CronField]:
    """A field's strategy, built once: `*`, a special, or 1–3 comma-separated terms, each
    n, a-b, a-b/s, a/s or */s, with numbers sometimes spelled as names."""
    values = st.integers(low, high)
    steps = st.integers(1, high - low + 1)
    shapes = st.sampled_from(["n", "range", "range_step", "from_step", "star_step"])
    spelled = st.booleans() if names is not None else st.just(False)

    @st.composite
    def term(draw: st.DrawFn) -> CronField:
        def spell(value: int) -> str:
            if draw(spelled) and names is not None and value - low < len(names):
                return names[value - low]
            return str(value)

        shape = draw(shapes)
        a = draw(values)
        if shape == "n":
            return CronField(text=spell(a), values=frozenset([a]))
        step = draw(steps)
        if shape == "star_step":
            return CronField(text=f"*/{step}", values=frozenset(range(low, high + 1, step)))
        if shape == "from_step":
            return CronField(text=f"{a}/{step}", values=frozenset(range(a, high + 1, step)))
        a, b = sorted((a, draw(values)))
        text = f"{spell(a)}-{spell(b)}"
        if shape == "range":
            return CronField(text=text, values=frozenset(range(a, b + 1)))
        return CronField(text=f"{text}/{step}", values=frozenset(range(a, b + 1, step)))

    def joined(terms: list[CronField]) -> CronField:
        matched: frozenset[int] = frozenset().union(*(t.values for t in terms))
        return CronField(text=",".join(t.text for t in terms), values=matched)

    every = st.just(CronField(text="*", values=frozenset(range(low, high + 1))))
    listed = st.lists(term(), min_size=1, max_size=3).map(joined)
    return every | listed | st.sampled_from(specials) if specials else every | listed


def _weekday_specials() -> tuple[CronField, ...]:
    last = [
        CronField(text=f"{d}L", values=frozenset(), rules=(_last_weekday_named(d),))
        for d in range(7)
    ]
    nth = [
        CronField(text=f"{DAY_NAMES[d]}#{n}", values=frozenset(), rules=(_nth_weekday(d, n),))
        for d in (0, 1, 5)
        for n in (1, 2, 5)
    ]
    return (*last, *nth)


DAY_SPECIALS = (
    CronField(text="L", values=frozenset(), rules=(_last_day,)),
    CronField(text="LW", values=frozenset(), rules=(_last_weekday_of_month,)),
)
WEEKDAY_SPECIALS = _weekday_specials()


def _weekday_values(field: CronField) -> CronField:
    # 7 is another name for Sunday.
    values = field.values | ({0} if 7 in field.values else set())
    return CronField(text=field.text, values=frozenset(values), rules=field.rules)


ALL_DAYS = CronField(text="*", values=frozenset(range(1, 32)))
ALL_MONTHS = CronField(text="*", values=frozenset(range(1, 13)))
ALL_WEEKDAYS = CronField(text="*", values=frozenset(range(8)))
EARLY_HOURS = tuple(CronField(text=str(h), values=frozenset([h])) for h in (0, 1, 2, 3))

MINUTES = _field(0, 59)
HOURS = _field(0, 23) | st.sampled_from(EARLY_HOURS)
DAYS = _field(1, 31, specials=DAY_SPECIALS) | st.just(ALL_DAYS)
MONTHS = _field(1, 12, MONTH_NAMES) | st.just(ALL_MONTHS)
WEEKDAYS = (_field(0, 7, DAY_NAMES, WEEKDAY_SPECIALS) | st.just(ALL_WEEKDAYS)).map(_weekday_values)
DAILY_MINUTES = st.integers(0, 59)
DAILY_HOURS = st.sampled_from([0, 1, 2, 3, 23]) | st.integers(0, 23)


def _daily(minute: int, hour: int) -> CronCase:
    return CronCase(
        minute=CronField(text=str(minute), values=frozenset([minute])),
        hour=CronField(text=str(hour), values=frozenset([hour])),
        day=ALL_DAYS,
        month=ALL_MONTHS,
        weekday=ALL_WEEKDAYS,
    )


def _case(fields: tuple[CronField, CronField, CronField, CronField, CronField]) -> CronCase:
    minute, hour, day, month, weekday = fields
    return CronCase(minute=minute, hour=hour, day=day, month=month, weekday=weekday)


# A quarter are daily (`m h * * *`), the shape DST bites hardest.
CRON_CASES: st.SearchStrategy[CronCase] = st.one_of(
    st.builds(_daily, DAILY_MINUTES, DAILY_HOURS),
    *[st.tuples(MINUTES, HOURS, DAYS, MONTHS, WEEKDAYS).map(_case)] * 3,
)
