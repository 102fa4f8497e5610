"""Retry delays (pure): fixed or exponential, capped.

Owns the arithmetic of backoff only; the retry policy that holds the numbers lives in
handler_map.py.
"""

from typing import Literal

BackoffKind = Literal["fixed", "exponential"]


def retry_delay_ms(kind: BackoffKind, base_ms: float, max_ms: float, attempt: int) -> float:
    """The delay before the attempt after `attempt` (1-based) failed.

    fixed: always `base_ms`; exponential: base_ms * 2**(attempt-1); both capped at `max_ms`.
    """
    if attempt < 1:
        raise ValueError("attempt is 1-based")
    # The exponent is capped so a large attempt number cannot overflow a float.
    delay = base_ms if kind == "fixed" else base_ms * 2.0 ** min(attempt - 1, 60)
    return float(min(delay, max_ms))
