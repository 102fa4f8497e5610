"""The uvicorn server of `laneway serve`, whose SIGINT and SIGTERM end it as they end `worker`.

Owns how `serve` takes its stop signals: on the event loop, as `worker` does, and not raised
again once the shutdown is over. uvicorn's own handlers re-raise a captured signal after a
clean shutdown, so the process died of it (exit 143 for SIGTERM; for SIGINT a
KeyboardInterrupt) although nothing went wrong. Imported by `serve` alone, like uvicorn.
"""

import asyncio
import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

import uvicorn

from laneway.engine.run_calls import skip_all_drains

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Server(uvicorn.Server):
    """uvicorn.Server whose stop signals set its exit flags (uvicorn's handle_exit: the first
    stops it gracefully, a second SIGINT forces it) and leave no signal to raise afterwards.
    A second signal also cuts short the drain of every engine the process runs, as it does
    for `worker`."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        again = self.should_exit
        super().handle_exit(sig, frame)
        if again:
            skip_all_drains()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        loop = asyncio.get_running_loop()
        for signum in STOP_SIGNALS:
            loop.add_signal_handler(signum, self.handle_exit, signum, None)
        try:
            yield
        finally:
            for signum in STOP_SIGNALS:
                loop.remove_signal_handler(signum)
