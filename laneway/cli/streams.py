"""The standard streams a command runs with: file descriptors 0, 1 and 2 open, and
sys.stdin, sys.stdout and sys.stderr usable, before anything else opens a file.

Owns reopening a stream that the caller closed (`laneway enqueue x >&-`) on /dev/null, and
OutputError, which a failed write to stdout raises. Does not decide what a failed write means
for the exit code (`main` in __init__.py).
"""

import errno
import io
import os
import sys
from typing import TYPE_CHECKING, Literal, TextIO

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

_STANDARD_FDS = (0, 1, 2)


class OutputError(OSError):
    """A write to stdout failed, and not because its reader went away (BrokenPipeError): a
    full disk (`> /dev/full`), an I/O error. A class of its own, so that `main` tells it from
    an OSError of the command's work."""


def output_error(code: int | None, reason: str | None) -> OSError:
    """The error of a write to stdout that failed with errno `code`: BrokenPipeError for
    EPIPE (the reader went away: a quiet exit 141), else OutputError."""
    if code == errno.EPIPE:
        return BrokenPipeError(code, reason)
    return OutputError(code, reason)


class _Stdout(io.FileIO):
    """File descriptor 1, whose failed writes raise output_error()'s errors."""

    def write(self, data: "ReadableBuffer", /) -> int:
        try:
            return super().write(data)
        except OSError as exc:
            raise output_error(exc.errno, exc.strerror) from None


def open_standard_streams() -> None:
    """Point each of the file descriptors 0, 1 and 2 that is closed at /dev/null, and give
    Python a file object on it where it set sys.stdin, sys.stdout or sys.stderr to None (it
    does when the descriptor was closed as it started).

    A closed one is free for the next file opened: uvloop's event loop took it for one of its
    own, and libuv aborted the process (exit 134) as it closed it at the end, after the
    command's work was done. On /dev/null, what is written there goes nowhere, as with
    `> /dev/null`, and stdin reads as empty.
    """
    for fd in _STANDARD_FDS:
        try:
            os.fstat(fd)
        except OSError as exc:
            if exc.errno != errno.EBADF:
                raise
            null = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
            if null != fd:  # os.open takes the lowest free one: fd, as those below are open now
                os.dup2(null, fd)
                os.close(null)
            os.set_inheritable(fd, True)  # as the standard streams are, for child processes
    if sys.stdin is None:
        sys.stdin = _text_file(0, "r")
    if sys.stdout is None or sys.stdout is sys.__stdout__:  # not one a test put there
        sys.stdout = _checked_stdout(sys.stdout)
    if sys.stderr is None:
        sys.stderr = _text_file(2, "w", errors="backslashreplace")


def _text_file(fd: int, mode: Literal["r", "w"], errors: str = "strict") -> TextIO:
    """A text file on `fd`, as Python's own standard streams are (UTF-8, line-buffered)."""
    # Never closed: it is the process's, for as long as it runs, as sys.stdout is.
    return open(fd, mode, buffering=1, encoding="utf-8", errors=errors, closefd=False)


def _checked_stdout(stdout: TextIO | None) -> TextIO:
    """A text file on descriptor 1 as `stdout` was (None: as Python's own are), whose failed
    writes raise OutputError or BrokenPipeError, wherever they happen: in print, in rich's
    Console, or in the flush at the end."""
    if stdout is not None:
        stdout.flush()
    return io.TextIOWrapper(
        io.BufferedWriter(_Stdout(1, "w", closefd=False)),
        encoding=stdout.encoding if stdout is not None else "utf-8",
        errors=stdout.errors if stdout is not None and stdout.errors else "strict",
        line_buffering=stdout.line_buffering if isinstance(stdout, io.TextIOWrapper) else True,
    )
