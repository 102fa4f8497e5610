"""The soak's memory verdict: slopes over long enough windows, spreads everywhere."""

from collections.abc import Callable

from tests.chaos.soak import Sample, memory_rows


def samples(series: dict[str, list[tuple[float, float]]]) -> list[Sample]:
    """One Sample per time point holding the RSS of every process sampled then."""
    by_time: dict[float, dict[str, float]] = {}
    for key, points in series.items():
        for t, mib in points:
            by_time.setdefault(t, {})[key] = mib
    return [
        Sample(
            t=t,
            rss=rss,
            fds={},
            tasks=None,
            connections={},
            sizes={},
            dead={},
            live={},
            last_autovacuum={},
            notification_queue=0.0,
        )
        for t, rss in sorted(by_time.items())
    ]


def every_10_s(
    start_s: float, end_s: float, mib: Callable[[float], float]
) -> list[tuple[float, float]]:
    return [(float(t), mib(t)) for t in range(int(start_s), int(end_s) + 1, 10)]


HOUR = 3600.0


def verdicts(series: dict[str, list[tuple[float, float]]]) -> dict[str, bool | None]:
    return {row.measure: row.passed for row in memory_rows(samples(series), HOUR)}


def test_a_process_growing_10_mib_an_hour_fails_and_a_flat_one_passes() -> None:
    result = verdicts(
        {
            "flat": every_10_s(0, HOUR, lambda t: 60.0 + (t % 20) / 100),
            "leaking": every_10_s(0, HOUR, lambda t: 60.0 + 10.0 * t / HOUR),
        }
    )
    assert result == {"RSS flat": True, "RSS leaking": False}


def test_a_late_short_lived_process_is_judged_by_its_spread_not_one_step() -> None:
    # Restarted 36 minutes in, so sampled for 12 minutes after its own warm-up: one 1 MiB
    # step in the middle (pool connections opened) extrapolates past 5 MiB/h but is no trend;
    # a 15 % jump still fails.
    start = 36 * 60.0
    middle = HOUR - 6 * 60.0
    rows = memory_rows(
        samples(
            {
                "step": every_10_s(start, HOUR, lambda t: 60.0 + (1.0 if t > middle else 0)),
                "jump": every_10_s(start, HOUR, lambda t: 60.0 + (9.0 if t > middle else 0)),
            }
        ),
        HOUR,
    )
    assert {row.measure: row.passed for row in rows} == {"RSS step": True, "RSS jump": False}
    slope = float(rows[0].measured.split(" MiB/h")[0])
    assert slope > 5.0
