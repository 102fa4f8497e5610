"""The trace of one HTTP request or websocket: its id, whether it found the database down, and
what of it has already happened.

Owns the context variable that carries a Trace through everything a request runs, tasks it
starts included, and the rule for request ids. http/request_ids.py sets it; graphql/errors.py
reads it to put the id on masked errors and to mark a request as SERVICE_UNAVAILABLE, and
graphql/fields.py to list the root mutation fields that completed; log records of
`laneway.api.*` loggers get the id as `request_id`.
"""

import contextlib
import logging
import os
import re
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

REQUEST_ID_HEADER = "x-request-id"
_VALID_REQUEST_ID = re.compile(r"[A-Za-z0-9-]{1,64}")


@dataclass(slots=True)
class Trace:
    """What the middleware, the error mapping and the mutation fields share about one request.

    `completed` lists an HTTP request's root mutation fields that completed, by response key:
    they run one after another, each in its own transaction, so these committed whatever comes
    after. It is None on a websocket, whose trace lasts as long as the connection. `failed`
    holds, for each root mutation field that failed, how many of `completed` had completed
    before it: an error at or below a root mutation field lists those that completed up to it
    (`completed_up_to`, graphql/errors.py).
    """

    request_id: str
    database_unavailable: bool = False
    answered_data: bool = False  # the GraphQL result's `data` was not null
    completed: list[str] | None = None
    failed: dict[str, int] | None = None

    def nothing_done(self) -> bool:
        """True when the answer holds no data and no root mutation field completed: only then
        may a status tell the client to send the request again (503 with Retry-After), since
        a retry would discard data or repeat a write otherwise."""
        return not self.answered_data and not self.completed

    def record_completed(self, response_key: str) -> None:
        """Note that the root mutation field answered under `response_key` completed."""
        if self.completed is not None:
            self.completed.append(response_key)

    def record_failed(self, response_key: str) -> None:
        """Note that the root mutation field answered under `response_key` failed, after those
        `completed` lists now."""
        if self.completed is None:
            return
        if self.failed is None:
            self.failed = {}
        self.failed.setdefault(response_key, len(self.completed))

    def completed_up_to(self, response_key: str) -> list[str]:
        """The root mutation fields that completed up to an error under the one answered under
        `response_key`: those before it when it failed itself, those up to and including it
        when it completed (committed) and a field of its result failed; none when it is not a
        root mutation field this trace knows, or on a websocket."""
        if self.completed is None:
            return []
        if self.failed is not None and response_key in self.failed:
            return self.completed[: self.failed[response_key]]
        if response_key in self.completed:
            return self.completed[: self.completed.index(response_key) + 1]
        return []


_current: ContextVar[Trace | None] = ContextVar("laneway_trace", default=None)


def current_trace() -> Trace | None:
    """The trace of the request being served, or None outside of one."""
    return _current.get()


def request_id_for(incoming: str | None) -> str:
    """The caller's X-Request-ID when it is 1-64 of [A-Za-z0-9-], else a fresh one (32 random
    hex digits, as a uuid4's hex, at a fifth of its cost)."""
    if incoming is not None and _VALID_REQUEST_ID.fullmatch(incoming):
        return incoming
    return os.urandom(16).hex()


@contextlib.contextmanager
def traced(trace: Trace) -> Iterator[Trace]:
    """Make `trace` the current one for the code (and the tasks it starts) inside."""
    token = _current.set(trace)
    try:
        yield trace
    finally:
        _current.reset(token)


class RequestIdFilter(logging.Filter):
    """Adds `request_id` to records logged while a request is served (never replaces one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        trace = _current.get()
        if trace is not None and not hasattr(record, "request_id"):
            record.request_id = trace.request_id
        return True


def tag_log_records(*logger_names: str) -> None:
    """Install the RequestIdFilter on these loggers, once each."""
    for name in logger_names:
        target = logging.getLogger(name)
        if not any(isinstance(f, RequestIdFilter) for f in target.filters):
            target.addFilter(RequestIdFilter())
