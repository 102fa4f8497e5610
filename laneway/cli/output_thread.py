"""OutputThread: stdout written by a thread of its own, so that the event loop never waits for
the reader of the output.

Owns the handing over of what a long-running command (`watch`) prints: write() keeps the text
and returns at once, from the event loop or from rich's refresh thread; the thread writes it to
the file descriptor, blocking there, not on the loop, while the reader pauses (a pager, a
`| grep` at a full pipe). A print that blocked the loop stalled the websocket's keepalive, and
the server dropped the connection after about 40 s. What is kept is bounded by the caller,
which waits (`room`) while more than LIMIT bytes wait. A write that fails (the reader gone:
BrokenPipeError) ends the command's block at once (`output_thread`), as a blocking print's
failure did. Does not format anything (output.py).
"""

import asyncio
import collections
import contextlib
import os
import threading
from collections.abc import AsyncIterator, Callable
from typing import IO, TextIO, cast

from laneway.cli.streams import output_error

LIMIT = 16 * 1024 * 1024
"""Bytes kept for a paused reader before `room` makes the command wait: hours of events at the
usual rates; a reader gone for longer lets the connection's keepalive lapse, as before."""


class OutputThread:
    """A text file on the descriptor `fd` whose writes a daemon thread performs: what print()
    and rich's Console use of a file (write, flush, isatty, fileno, encoding). `on_failure`
    is called on the event loop when a write fails, unless this is closed by then."""

    def __init__(
        self, fd: int, *, encoding: str, errors: str, on_failure: Callable[[], object]
    ) -> None:
        self._fd, self.encoding, self.errors = fd, encoding, errors
        self.closed = False
        self._on_failure = on_failure
        self._loop = asyncio.get_running_loop()
        self._lock = threading.Condition()  # guards everything below
        self._pending: collections.deque[bytes] = collections.deque()
        self._size = 0  # bytes not yet written: pending, and the chunk being written
        self._failure: OSError | None = None
        self._closing = False
        self._waiters: list[asyncio.Future[None]] = []
        self._thread = threading.Thread(target=self._run, name="laneway-output", daemon=True)
        self._thread.start()

    @property
    def file(self) -> IO[str]:
        """This, as the file print() and rich's Console take (their stubs ask for IO[str])."""
        return cast(IO[str], self)

    @property
    def failed(self) -> bool:
        return self._failure is not None

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        """Keep `text` for the thread to write; never blocks.

        Raises:
            OSError: an earlier write failed (BrokenPipeError: the reader went away).
        """
        self.raise_failure()
        data = text.encode(self.encoding, self.errors)
        if data:
            with self._lock:
                self._pending.append(data)
                self._size += len(data)
                self._lock.notify()
        return len(text)

    def flush(self) -> None:
        """Nothing to do here (the thread writes as soon as it can); says an earlier failure."""
        self.raise_failure()

    def raise_failure(self) -> None:
        """Raise the error of the write that failed, if one did.

        Raises:
            OSError: a new one each time (one raised again would grow its traceback):
                BrokenPipeError, the reader went away, or OutputError.
        """
        if self._failure is not None:
            raise output_error(self._failure.errno, self._failure.strerror)

    async def room(self) -> None:
        """Wait while more than LIMIT bytes wait to be written."""
        await self._below(LIMIT)

    async def drained(self) -> None:
        """Wait until everything written so far is written to the descriptor.

        Raises:
            OSError: a write failed.
        """
        await self._below(0)

    async def _below(self, size: int) -> None:
        while True:
            with self._lock:
                if self._size <= size or self._failure is not None:
                    break
                waiter = self._loop.create_future()
                self._waiters.append(waiter)
            await waiter
        self.raise_failure()

    def _run(self) -> None:
        """The thread: write what is pending, in order, until closed or a write fails."""
        while True:
            with self._lock:
                while not self._pending and not self._closing:
                    self._lock.wait()
                if not self._pending:
                    return
                chunk = b"".join(self._pending)
                self._pending.clear()
            try:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(self._fd, view) :]
            except OSError as exc:
                with self._lock:
                    self._failure, self._size = exc, 0
                    self._pending.clear()
                self._call_on_loop(self._failed)
                self._call_on_loop(self._wake)
                return
            with self._lock:
                self._size -= len(chunk)
            self._call_on_loop(self._wake)

    def _call_on_loop(self, callback: Callable[[], None]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            self._loop.call_soon_threadsafe(callback)

    def _wake(self) -> None:
        """Let the waiters look again."""
        with self._lock:
            waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _failed(self) -> None:
        if not self.closed:
            self._on_failure()

    def close(self) -> None:
        """Let the thread end once everything pending is written (it does not wait for it)."""
        with self._lock:
            self._closing = True
            self._lock.notify()
        self.closed = True


@contextlib.asynccontextmanager
async def output_thread(stream: TextIO) -> AsyncIterator[OutputThread]:
    """An OutputThread on the descriptor of `stream` (stdout), in its encoding, for the block
    in the current task.

    A write that fails cancels the block at once (it may be waiting for events that never
    come), and is then raised from it: the block ends as a blocking print's BrokenPipeError
    ended it. Otherwise everything is written before this exits, even when the block raised
    (but a cancel, a second Ctrl-C, stops that wait).
    """
    task = asyncio.current_task()
    assert task is not None
    stream.flush()  # what was printed through `stream` before comes first
    cancelled = False

    def cancel() -> None:
        nonlocal cancelled
        cancelled = task.cancel()

    output = OutputThread(
        stream.fileno(),
        encoding=stream.encoding,
        errors=stream.errors or "strict",
        on_failure=cancel,
    )
    try:
        try:
            yield output
        except BaseException:
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await output.drained()
            raise
        await output.drained()
    except BaseException:
        if not output.failed:
            raise
        if cancelled:
            task.uncancel()
        output.raise_failure()  # in place of what it caused (its cancel) or came with
        raise
    finally:
        output.close()
