"""Test sizes: the PR tier's in `make test`, the plan's with LANEWAY_CHAOS_FULL=1.

The full sizes are run by hand on a quiet machine (docs/reliability.md); timing figures are
only judged there, never in `make test`.
"""

import os

FULL = os.environ.get("LANEWAY_CHAOS_FULL") == "1"


def size(pr: int, full: int) -> int:
    """`pr` in the PR tier, `full` with LANEWAY_CHAOS_FULL=1."""
    return full if FULL else pr
