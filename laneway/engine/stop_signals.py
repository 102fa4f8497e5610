"""SIGINT and SIGTERM as a process's stop: the first stops it gracefully, a second hurries it.

Owns the signal handlers of a process that runs until it is told to stop (`laneway worker`,
`Engine.run_until_stopped` in an application's own process): installed on the running event
loop for a block, and removed after it, so a signal after the block acts as it would have
before. Python's default for SIGTERM is to die at once, with every step in flight left to
wait out its lease in another process; under these handlers it drains as a deploy expects.
"""

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def stop_signals(first: Callable[[], object], again: Callable[[], object]) -> Iterator[None]:
    """For the block, the first SIGINT or SIGTERM calls `first`, each later one `again`."""
    loop = asyncio.get_running_loop()
    received = 0

    def on_signal() -> None:
        nonlocal received
        received += 1
        (first if received == 1 else again)()

    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, on_signal)
    try:
        yield
    finally:
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)
