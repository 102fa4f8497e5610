"""The standard streams a command runs with: file descriptors 0, 1 and 2 open, and
sys.stdin, sys.stdout and sys.stderr usable, before anything else opens a file.

Owns reopening a stream that the caller closed (`laneway enqueue x >&-`) on /dev/null. Does
not decide what a failed write means for the exit code (`main` in __init__.py).
"""

import errno
import os
import sys
from typing import Literal, TextIO

_STANDARD_FDS = (0, 1, 2)


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
    if sys.stdout is None:
        sys.stdout = _text_file(1, "w")
    if sys.stderr is None:
        sys.stderr = _text_file(2, "w", errors="backslashreplace")


def _text_file(fd: int, mode: Literal["r", "w"], errors: str = "strict") -> TextIO:
    """A text file on `fd`, as Python's own standard streams are (UTF-8, line-buffered)."""
    # Never closed: it is the process's, for as long as it runs, as sys.stdout is.
    return open(fd, mode, buffering=1, encoding="utf-8", errors=errors, closefd=False)
