"""Names: what a workflow, queue, action, checkpoint label or signal may be called. No I/O."""

import re

from laneway.errors import InvalidInputError

NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


def check_name(value: str, what: str) -> str:
    """Names of workflows, queues, actions and signals: 1-64 of letters, digits and `_ . : -`."""
    if not isinstance(value, str) or not NAME_PATTERN.match(value):
        raise InvalidInputError(f"{what} must be 1-64 letters, digits or _ . : - (got {value!r})")
    return value


def check_version(value: object, what: str) -> str:
    """A workflow's version, as text: 1-64 of letters, digits and `_ . : -` ("1", "2.3",
    "2026-12-01"); a positive whole number (a template's `version=2`) is taken as its digits."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        value = str(value)
    if not isinstance(value, str) or not NAME_PATTERN.match(value):
        raise InvalidInputError(f"{what} must be 1-64 letters, digits or _ . : - (got {value!r})")
    return value
