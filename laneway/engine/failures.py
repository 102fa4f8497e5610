"""Failures you can debug: what a failed attempt keeps of its exception. No I/O.

Owns how an exception becomes a failure: its type (the class's name, qualified by its module
unless it is a builtin, Laneway's own or defined in `__main__`; for a template's stage, its
operation's exception's), its message, `lastError`'s text (`Type: message`), and a bounded
traceback whose frames are the user's code first: the engine's own frames (laneway/engine)
and asyncio's are dropped from the middle, since they are the same for every failure, and a
traceback over the cap keeps its innermost frames, where the error was raised.
"""

import asyncio
import traceback
from dataclasses import dataclass
from pathlib import Path

from laneway.engine.payloads import storable_text

MAX_MESSAGE_CHARS = 4000
MAX_TRACEBACK_CHARS = 8000
_CUT = "… (message cut)\n"
_ENGINE_DIR = str(Path(__file__).resolve().parent)
_ASYNCIO_DIR = str(Path(asyncio.__file__).resolve().parent)


@dataclass(frozen=True, slots=True, kw_only=True)
class Failure:
    """One failed attempt's exception, as stored (laneway.failures) and shown (`failures`)."""

    type: str
    message: str
    traceback: str | None
    stage: str | None = None
    operation: str | None = None

    @property
    def last_error(self) -> str:
        """`Type: message`, as `lastError` reads (the type alone when there is no message)."""
        text = f"{self.type}: {self.message}" if self.message else self.type
        return text[:MAX_MESSAGE_CHARS]


def type_name(exc: BaseException) -> str:
    cls = type(exc)
    module = cls.__module__
    if module in ("builtins", "__main__") or module.startswith("laneway."):
        return cls.__qualname__
    return f"{module}.{cls.__qualname__}"


class StageFailure(Exception):  # noqa: N818 - a kind of failure, as the others read
    """A template stage's failure (stage_run.StageFailedError, context_budget's): `stage` and
    `operation` (when one is to blame) say where, and its cause, if any, is the operation's
    own exception."""

    def __init__(self, message: str, *, stage: str, operation: str | None) -> None:
        super().__init__(message)
        self.stage = stage
        self.operation = operation


def failure_of(exc: BaseException) -> Failure:
    """The failure an exception makes, with the stage and operation a template's carries; its
    texts as a text column can hold them (payloads.storable_text). A template's failure
    raised from its operation's exception has that one's type and traceback: the user's
    code, as a handler's would; its message is the stage's, which names the stage and the
    operation. One with no such exception (the operation returned failed(...), timed out,
    returned what is not a result or was a plain def) keeps its own type and has no
    traceback, as no code of the user's raised. A message its exception cannot give (str()
    raises) reads as Python's own traceback says it."""
    stage: str | None
    operation: str | None
    named = exc
    if isinstance(exc, StageFailure):
        stage = storable_text(exc.stage)
        operation = None if exc.operation is None else storable_text(exc.operation)
        cause = exc.__cause__
        frames = None if cause is None else format_traceback(cause)
        if cause is not None and frames is not None:
            # Raised by the operation's code (a plain def's NotAwaitableError is made by the
            # engine, never raised, and has no frames): the type a handler's would have.
            named = cause
    else:
        stage = operation = None
        frames = format_traceback(exc)
    return Failure(
        type=storable_text(type_name(named)),
        message=storable_text(_message_of(exc)[:MAX_MESSAGE_CHARS]),
        traceback=None if frames is None else storable_text(frames),
        stage=stage,
        operation=operation,
    )


def _message_of(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return "<exception str() failed>"


def _is_internal(frame: traceback.FrameSummary) -> bool:
    filename = str(Path(frame.filename).resolve()) if frame.filename else ""
    return filename.startswith((_ENGINE_DIR, _ASYNCIO_DIR))


def format_traceback(exc: BaseException, limit: int = MAX_TRACEBACK_CHARS) -> str | None:
    """The exception's traceback without the engine's and asyncio's frames, at most `limit`
    characters (the innermost kept, and the chain's first exception named when the cut took
    it); None when it has no frames of its own."""
    # compact: as Python prints a chain. Without it the hidden __context__ of an exception
    # raised `from` another is built too, and marked seen, so when that exception comes again
    # down the __cause__ chain (the root cause, often) it is left out.
    summary = traceback.TracebackException.from_exception(exc, capture_locals=False, compact=True)
    frames = [frame for frame in summary.stack if not _is_internal(frame)]
    if not frames and not summary.stack:
        return None
    summary.stack = traceback.StackSummary.from_list(frames or list(summary.stack))
    text = "".join(summary.format())
    if len(text) <= limit:
        return text
    # A message as long as the cap would leave no frame: it keeps a quarter of the room.
    last = "".join(summary.format_exception_only())
    room = limit // 4
    if len(last) > room and text.endswith(last):
        text = text[: -len(last)] + last[: room - len(_CUT)] + _CUT
        if len(text) <= limit:
            return text
    # Python prints a chain's first exception first, so the cut loses it: the marker names it.
    first = _first_of_chain(summary)
    said = "" if first is summary else "".join(first.format_exception_only()).strip()
    said = said.splitlines()[0][: limit // 8] if said else ""
    marker = f"… (earlier frames omitted{'; the chain began with ' + said if said else ''})\n"
    return marker + text[-(limit - len(marker)) :]


def _first_of_chain(summary: traceback.TracebackException) -> traceback.TracebackException:
    """The exception a chain began with: the cause of the cause… (or the context, where no
    `from None` hid it), as Python prints it first."""
    seen = {id(summary)}
    while True:
        earlier = summary.__cause__ or (
            None if summary.__suppress_context__ else summary.__context__
        )
        if earlier is None or id(earlier) in seen:
            return summary
        seen.add(id(earlier))
        summary = earlier
