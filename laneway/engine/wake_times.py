"""WakeTimes: when the claim loop must act before its next poll, and its sleep until then.

Owns three monotonic deadlines: a claim (a retry's backoff, a delay or a rate token this
process knows of), the wake-up of waiting instances, and the firing of the next schedule.
Once set, a deadline only moves sooner until the loop takes it; moving one sooner re-times a
sleep in progress. Also the sleep itself: until a wake-up, a stop, the first deadline or the
next poll. The claim loop (claim_loop.py) decides what each deadline means.
"""

import asyncio
import contextlib
import time

WAKE_MARGIN_SECONDS = 0.002  # act this long after a due time, so that it is due by then


class WakeTimes:
    """The claim loop's deadlines (None: none set), and its sleep."""

    def __init__(self) -> None:
        self.claim: float | None = None
        self.waiters: float | None = None
        self.schedules: float | None = None
        self._retimed = asyncio.Event()  # a deadline moved sooner while the loop slept

    def claim_in(self, seconds: float) -> None:
        self.claim = self._sooner(self.claim, seconds, 0.0)

    def waiters_in(self, seconds: float) -> None:
        self.waiters = self._sooner(self.waiters, seconds, WAKE_MARGIN_SECONDS)

    def schedules_in(self, seconds: float) -> None:
        self.schedules = self._sooner(self.schedules, seconds, WAKE_MARGIN_SECONDS)

    def _sooner(self, current: float | None, seconds: float, margin: float) -> float:
        deadline = time.monotonic() + max(seconds, 0.0) + margin
        if current is not None and current <= deadline:
            return current
        self._retimed.set()
        return deadline

    async def sleep(self, stopping: asyncio.Event, wake: asyncio.Event, poll_at: float) -> bool:
        """Wait for `wake`, a stop, `poll_at` or the first deadline before it (re-read when
        one is moved sooner); True when woken."""
        while True:
            self._retimed.clear()
            until = poll_at
            for deadline in (self.claim, self.waiters, self.schedules):
                if deadline is not None:
                    until = min(until, deadline)
            seconds = max(until - time.monotonic(), 0.0)
            woken = await _wait_any(stopping, wake, seconds, self._retimed)
            if woken or stopping.is_set() or not self._retimed.is_set():
                return woken


def is_due(deadline: float | None) -> bool:
    """Whether a deadline is set and has come."""
    return deadline is not None and time.monotonic() >= deadline


async def wait(stopping: asyncio.Event, seconds: float) -> None:
    """Wait `seconds`, or less if `stopping` is set meanwhile."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stopping.wait()


async def _wait_any(
    stopping: asyncio.Event, wake: asyncio.Event, seconds: float, *others: asyncio.Event
) -> bool:
    """Wait for a wake-up, a stop, one of `others`, or the timeout; True when woken."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            tasks = {asyncio.ensure_future(e.wait()) for e in (stopping, wake, *others)}
            try:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in tasks:
                    task.cancel()
    return wake.is_set()
