"""Schedule rules: parse an interval or a cron expression, and compute the next fire time.

Pure: datetimes in, UTC datetimes out, cron matched in the zone's wall time with zoneinfo.
Does not store schedules or enqueue instances (store, claim_loop.py), and never evaluates
cron in SQL.
"""

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cronsim import CronSim, CronSimError
from cronsim.cronsim import SYMBOLIC_DAYS, SYMBOLIC_MONTHS

from laneway.errors import InvalidInputError

EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
MIN_EVERY: Final = timedelta(seconds=1)
MAX_EVERY: Final = timedelta(days=366)
MAX_CRON_LENGTH: Final = 200

# cronsim 2.8 knows no @-aliases, so they are spelled out here as Vixie cron defines them.
CRON_ALIASES: Final[dict[str, str]] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# Each alias's expression to the first alias that names it: the one spelling of its synonyms.
_FIRST_ALIAS: Final = {expression: alias for alias, expression in reversed(CRON_ALIASES.items())}

# The names of tzdata's zones whose offset is 0 at every instant (Etc/UTC, Etc/GMT and their
# links): an interval, counted in UTC, takes any of them as UTC.
UTC_ZONES: Final = frozenset(
    {"UTC", "Etc/UTC", "UCT", "Etc/UCT", "Universal", "Etc/Universal", "Zulu", "Etc/Zulu"}
    | {"GMT", "Etc/GMT", "GMT0", "Etc/GMT0", "GMT+0", "Etc/GMT+0", "GMT-0", "Etc/GMT-0"}
    | {"Greenwich", "Etc/Greenwich"}
)
# Names a tz database lists that mean no one zone: the host's own zone (a link to
# /etc/localtime), and tzdata's placeholder for "the zone is not set".
_NOT_ZONES: Final = frozenset({"localtime", "Factory"})

_ONE_SECOND: Final = timedelta(seconds=1)
_ONE_DAY: Final = timedelta(days=1)
_EVERY_PATTERN: Final = re.compile(
    r"(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m(?!s))?(?:([0-9]+)s)?(?:([0-9]+)ms)?"
)
_MS_PER_UNIT: Final = (86_400_000, 3_600_000, 60_000, 1_000, 1)
_CRON_FIELDS: Final = "minute hour day-of-month month day-of-week"
_STEPPED_RANGE: Final = re.compile(r"([0-9A-Z]+)-([0-9A-Z]+)/0*[1-9][0-9]*")
# The names each field accepts, by position, with their numbers (cronsim upper-cases them).
_FIELD_NAMES: Final[tuple[dict[str, int], ...]] = (
    {},
    {},
    {},
    {name: number for number, name in enumerate(SYMBOLIC_MONTHS, start=1)},
    {name: number for number, name in enumerate(SYMBOLIC_DAYS)},
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Recurrence:
    """A parsed schedule rule: either an interval or a cron expression in a timezone.

    DST policy for cron, as Debian cron (and cronsim) has it. A fixed-time expression, whose
    minute and hour fields both do not start with `*` (`30 2 * * *`, `0 9-17 * * 1-5`),
    follows the wall clock: the local times that do not exist fire once in all, at the first
    instant after the gap (with a time at that instant the expression also has: `0,30 2 * * *`
    and `0 2,3 * * *` fire once at 03:00 when 02:00-03:00 is skipped), and a local time that
    happens twice fires once, the first time.
    Any other expression (`0 * * * *`, `*/15 * * * *`, `0 */6 * * *`) fires at every instant
    whose local time matches: a nonexistent local time never fires, and a repeated one fires
    at each of its two UTC instants.
    """

    every: timedelta | None
    cron: str | None
    timezone: str

    def __post_init__(self) -> None:
        if (self.every is None) == (self.cron is None):
            raise InvalidInputError("give exactly one of every or cron")

    def next_fire_after(self, after: datetime) -> datetime:
        """Return the first fire instant strictly after `after`, in UTC.

        Interval fires lie on the interval's grid counted from the Unix epoch, so every
        process computes the same fire times whenever it started.

        Raises:
            ValueError: `after` is naive.
            InvalidInputError: the cron expression has no fire in the next 50 years.
        """
        if after.utcoffset() is None:
            raise ValueError("after must be timezone-aware")
        after_utc = after.astimezone(UTC)
        if self.every is not None:
            return EPOCH + ((after_utc - EPOCH) // self.every + 1) * self.every
        if self.cron is not None:
            expression = CRON_ALIASES.get(self.cron.lower(), self.cron)
            zone = ZoneInfo(self.timezone)
            if _is_fixed_time(expression):
                return _next_fixed_time_fire(expression, zone, after_utc)
            return _next_matching_instant(expression, zone, after_utc)
        raise AssertionError("__post_init__ guarantees an interval or a cron expression")


def parse_every(text: str) -> timedelta:
    """Parse an interval such as "30s", "5m", "1h30m" or "2d" (case-insensitive).

    Units are d, h, m, s and ms, largest first, each at most once.

    Raises:
        InvalidInputError: `text` is not an interval, is under 1s, is not a whole number of
            seconds, or is over 366 days.
    """
    spec = text.strip().lower()
    match = _EVERY_PATTERN.fullmatch(spec)
    if not spec or match is None:
        raise InvalidInputError(
            f"invalid interval {_quote(text)}: expected numbers with units d, h, m, s or ms, "
            "largest first, such as '30s', '5m' or '1h30m'"
        )
    total_ms = sum(
        int(amount) * ms_per_unit
        for amount, ms_per_unit in zip(match.groups(), _MS_PER_UNIT, strict=True)
        if amount is not None
    )
    if total_ms < MIN_EVERY // timedelta(milliseconds=1):
        raise InvalidInputError(f"invalid interval {_quote(text)}: the minimum is 1s")
    if total_ms > MAX_EVERY // timedelta(milliseconds=1):
        raise InvalidInputError(f"invalid interval {_quote(text)}: the maximum is 366d")
    if total_ms % 1000:
        raise InvalidInputError(
            f"invalid interval {_quote(text)}: must be a whole number of seconds"
        )
    return timedelta(milliseconds=total_ms)


def format_every(every: timedelta) -> str:
    """An interval in its one spelling, largest units first, none of them zero: `1h` for
    "60m" or "1H", `1d1h30m` for "1d0h90m"; parse_every reads it back as the same interval."""
    left = every // timedelta(milliseconds=1)
    parts = []
    for unit, ms_per_unit in zip(("d", "h", "m", "s", "ms"), _MS_PER_UNIT, strict=True):
        amount, left = divmod(left, ms_per_unit)
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts)


def parse_recurrence(*, every: str | None, cron: str | None, timezone: str = "UTC") -> Recurrence:
    """Validate a schedule rule given as an interval or as a cron expression.

    A cron expression has the 5 standard fields, with cronsim's extensions (names, `L`,
    `LW`, `#`), or is one of CRON_ALIASES. An interval keeps `timezone` but ignores it.

    Raises:
        InvalidInputError: not exactly one of `every` and `cron` is given, either is
            invalid, or `timezone` is no zone this process can load (a new schedule's must
            also pass check_zone_name).
    """
    if (every is None) == (cron is None):
        raise InvalidInputError("give exactly one of every or cron")
    _load_zone(timezone)
    if every is not None:
        return Recurrence(every=parse_every(every), cron=None, timezone=timezone)
    return Recurrence(every=None, cron=_parse_cron(cron or ""), timezone=timezone)


def check_zone_name(timezone: str) -> None:
    """Refuse a timezone that a new schedule may not name: one not an IANA zone name.

    ZoneInfo (so parse_recurrence) also opens `localtime`, `posixrules`, `Factory` and the
    `posix/...` and `right/...` copies, whose meaning depends on the host (`right/` counts
    leap seconds). A schedule that a release before stored with such a name still loads and
    fires: only a create or a replace calls this.

    Raises:
        InvalidInputError: `timezone` is not a zone of this tz database, or is one of those.
    """
    if timezone not in _iana_zone_names():
        raise _invalid_zone(timezone)


def fire_key(schedule_name: str, fire_at: datetime) -> str:
    """Return the idempotency key of one fire: "schedule:<name>:<UTC ISO 8601 time>Z".

    Raises:
        ValueError: `fire_at` is naive.
    """
    if fire_at.utcoffset() is None:
        raise ValueError("fire_at must be timezone-aware")
    stamp = fire_at.astimezone(UTC).replace(tzinfo=None).isoformat()
    return f"schedule:{schedule_name}:{stamp}Z"


def _quote(text: str) -> str:
    """repr() of user input, cut short so that an error message stays readable."""
    return repr(text) if len(text) <= 60 else repr(text[:60]) + "…"


def _load_zone(timezone: str) -> ZoneInfo:
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError) as error:
        raise _invalid_zone(timezone) from error


def _invalid_zone(timezone: str) -> InvalidInputError:
    return InvalidInputError(
        f"invalid timezone {_quote(timezone)}: expected an IANA name such as "
        "'UTC' or 'America/New_York'"
    )


@cache
def _iana_zone_names() -> frozenset[str]:
    """The zone names of the tz database, read from disk once, when first asked."""
    return frozenset(available_timezones()) - _NOT_ZONES


def _parse_cron(text: str) -> str:
    """Return the expression in one spelling: its whitespace normalized, its names and letters
    in upper case (`MON`, `L`), a stepped range of one value (`5-5/10`) written as that value,
    and an alias in lower case, as the first of its synonyms (`@daily` for `@midnight`)."""
    if len(text) > MAX_CRON_LENGTH:
        raise InvalidInputError(
            f"invalid cron expression {_quote(text)}: longer than {MAX_CRON_LENGTH} characters"
        )
    expression = " ".join(text.upper().split())
    if expression.startswith("@"):
        alias = expression.lower()
        if alias not in CRON_ALIASES:
            raise InvalidInputError(
                f"invalid cron expression {_quote(text)}: unknown alias; "
                f"use one of {', '.join(CRON_ALIASES)}"
            )
        return _FIRST_ALIAS[CRON_ALIASES[alias]]
    if len(expression.split()) != 5:
        raise InvalidInputError(
            f"invalid cron expression {_quote(text)}: expected 5 fields ({_CRON_FIELDS})"
        )
    expression = _collapse_single_value_steps(expression)
    try:
        first_fire = next(CronSim(expression, datetime(2000, 1, 1)), None)
    except CronSimError as error:
        raise InvalidInputError(
            f"invalid cron expression {_quote(text)}: {str(error).lower()}"
        ) from error
    if first_fire is None:
        raise InvalidInputError(f"invalid cron expression {_quote(text)}: it never fires")
    return expression


def _collapse_single_value_steps(expression: str) -> str:
    """Rewrite a stepped range of one value (`5-5/10`) as that value, as Vixie cron reads it.

    cronsim 2.8 reads such a range as `5/10`, every 10th value from 5 to the field's end, so
    `0-0/1 * * * *` would fire every minute instead of once an hour.
    """
    fields = expression.split()
    return " ".join(
        ",".join(_collapse_term(term, names) for term in field.split(","))
        for field, names in zip(fields, _FIELD_NAMES, strict=True)
    )


def _collapse_term(term: str, names: dict[str, int]) -> str:
    match = _STEPPED_RANGE.fullmatch(term.upper())
    if match is None:
        return term
    first, last = (names.get(end, int(end) if end.isdigit() else -1) for end in match.groups())
    return term.split("-", 1)[0] if first == last >= 0 else term


def _is_fixed_time(expression: str) -> bool:
    """Debian cron's test for wall-clock DST handling, which cronsim copies."""
    minute, hour = expression.split()[:2]
    return not minute.startswith("*") and not hour.startswith("*")


def _next_fixed_time_fire(expression: str, zone: ZoneInfo, after: datetime) -> datetime:
    # _fixed_time_instant never decreases as wall time grows, and a wall time up to
    # after's own maps to at most `after`; so the first later match mapping past `after` is
    # next. Only the second pass of a repeated hour skips candidates here.
    for wall_time in CronSim(expression, _wall_time(after, zone)):
        fire_at = _fixed_time_instant(wall_time, zone)
        if fire_at > after:
            return fire_at
    raise _never_fires(expression, after)


def _fixed_time_instant(wall_time: datetime, zone: ZoneInfo) -> datetime:
    """The instant a fixed-time expression fires for a local wall time."""
    first_occurrence = wall_time.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if _wall_time(first_occurrence, zone) == wall_time:
        return first_occurrence
    # In a gap, the two folds give the instants just before and just after the change.
    gap_edges = sorted([first_occurrence, wall_time.replace(tzinfo=zone, fold=1).astimezone(UTC)])
    before_gap, after_gap = gap_edges
    gap_end = _next_offset_change(before_gap, after_gap, _offset(before_gap, zone), zone)
    return gap_end if gap_end is not None else after_gap


def _next_matching_instant(expression: str, zone: ZoneInfo, after: datetime) -> datetime:
    # Walk the spans of constant UTC offset from `after` on. Within a span wall time is UTC
    # plus a constant, so the span's first matching wall time is its first matching instant.
    # cronsim is only ever given naive wall times: its own zone arithmetic skips fires
    # around half-hour DST shifts (`0 */6 * * *` on Australia/Lord_Howe).
    lower = after
    offset = _offset(after, zone)
    while True:
        wall_time = next(CronSim(expression, _naive(lower) + offset), None)
        if wall_time is None:
            raise _never_fires(expression, after)
        candidate = (wall_time - offset).replace(tzinfo=UTC)
        change_at = _next_offset_change(lower, candidate, offset, zone)
        if change_at is None:
            return candidate
        # cronsim looks strictly after the wall time it is given, and change_at may match.
        lower, offset = change_at - _ONE_SECOND, _offset(change_at, zone)


def _next_offset_change(
    start: datetime, end: datetime, offset: timedelta, zone: ZoneInfo
) -> datetime | None:
    """The first whole second in (start, end] whose UTC offset is not `offset`, or None."""
    # Probing once a day relies on offset changes being more than a day apart, which holds
    # for every zone in current use.
    probe_from = start
    while probe_from < end:
        probe_to = min(probe_from + _ONE_DAY, end)
        if _offset(probe_to, zone) != offset:
            low = (probe_from - EPOCH) // _ONE_SECOND
            high = -((EPOCH - probe_to) // _ONE_SECOND)
            while high - low > 1:
                middle = (low + high) // 2
                if _offset(EPOCH + middle * _ONE_SECOND, zone) == offset:
                    low = middle
                else:
                    high = middle
            return EPOCH + high * _ONE_SECOND
        probe_from = probe_to
    return None


def _naive(instant: datetime) -> datetime:
    return instant.astimezone(UTC).replace(tzinfo=None)


def _wall_time(instant: datetime, zone: ZoneInfo) -> datetime:
    """The naive local wall time of an aware instant in `zone`."""
    return instant.astimezone(UTC).astimezone(zone).replace(tzinfo=None)


def _offset(instant: datetime, zone: ZoneInfo) -> timedelta:
    return _wall_time(instant, zone) - _naive(instant)


def _never_fires(expression: str, after: datetime) -> InvalidInputError:
    return InvalidInputError(
        f"cron expression {_quote(expression)} has no fire within 50 years after {after:%Y-%m-%d}"
    )
