"""Fixtures of the reliability tests: the figures each test measures, reported per test."""

from collections.abc import Callable

import pytest

Figure = Callable[[str, float | int | str], None]


@pytest.fixture
def figure(record_property: Callable[[str, object], None]) -> Figure:
    """Record a measured figure: in the junit XML as a property, and on stdout (`-rP`, `-s`)."""

    def record(name: str, value: float | int | str) -> None:
        record_property(name, value)
        print(f"figure {name} = {value}")

    return record
