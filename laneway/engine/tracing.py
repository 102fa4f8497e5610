"""OpenTelemetry traces of enqueues, claims, steps and operations, when the extra is installed.

Owns the spans the engine makes and the trace contexts it keeps with instances (W3C
traceparent strings: migrations/0018_traces.sql). An enqueue's context is stored with its
instance, so the spans of its steps, in whatever process runs them, are children of the span
that enqueued it; a retried step's span links to the span of the instance's first failed
attempt. The process's tracer provider is the application's to configure (the SDK, an
exporter); Laneway only uses the API.

`pip install laneway[otel]` brings the OpenTelemetry API and SDK. Without them, or with
LANEWAY_TRACING=0, `ENABLED` is False and every helper here returns at once: no span, no
context, nothing on the hot path but that test.
"""

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from laneway.config import flag_value
from laneway.model import InstanceRecord

try:
    from opentelemetry import trace
    from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the extra is not installed
    trace = None  # type: ignore[assignment]


def _switched_on(raw: str | None) -> bool:
    """LANEWAY_TRACING as every switch reads (config.flag_value); a word that is not one
    leaves tracing on here, and Settings.from_env refuses it where a process starts."""
    try:
        return flag_value(raw, True)
    except ValueError:
        return True


ENABLED = trace is not None and _switched_on(os.environ.get("LANEWAY_TRACING"))
TRACER_NAME = "laneway"
_PROPAGATOR = TraceContextTextMapPropagator() if ENABLED else None


def current_traceparent() -> str | None:
    """The traceparent of the current span (None when there is none, or tracing is off)."""
    if _PROPAGATOR is None:
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent")


def _context_of(traceparent: str | None) -> Any:
    assert _PROPAGATOR is not None
    return _PROPAGATOR.extract({"traceparent": traceparent}) if traceparent else None


_OFF: contextlib.AbstractContextManager[str | None] = contextlib.nullcontext(None)


RECHECK_SECONDS = 1.0  # while no tracer provider is set, look again at most this often
_provider_checked_at = -float("inf")
_provider_set = False


def _unconfigured() -> bool:
    """No tracer provider is set (the API's proxy stands in): a span would record nothing and
    carry only its parent's context, so with no parent either the helpers skip making one.
    Once set, a provider stays (the API allows one); until then the API is asked at most once
    per RECHECK_SECONDS (each ask reads the environment), so one set after start-up counts
    within a second."""
    global _provider_checked_at, _provider_set
    if _provider_set:
        return False
    now = time.monotonic()
    if now - _provider_checked_at >= RECHECK_SECONDS:
        _provider_checked_at = now
        _provider_set = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    return not _provider_set


def _skipped() -> bool:
    """Whether `span` makes no span: tracing is off, or no provider is set and there is no
    current span (such a span would carry no context)."""
    return not ENABLED or (
        _unconfigured() and not trace.get_current_span().get_span_context().is_valid
    )


def span(
    name: str, attributes: Mapping[str, str | int] | None = None
) -> contextlib.AbstractContextManager[str | None]:
    """A span around the block, a child of the current span; an exception leaving the block
    is recorded on it. Yields the span's own traceparent. When tracing is off: one shared
    no-op context that yields None, as when no tracer provider is set and there is no current
    span (such a span would carry no context)."""
    if _skipped():
        return _OFF
    return _span(name, attributes, None, None, False)


@contextlib.contextmanager
def _span(
    name: str,
    attributes: Mapping[str, str | int] | None,
    parent: str | None,
    link_to: str | None,
    kind_consumer: bool,
) -> Iterator[str | None]:
    tracer = trace.get_tracer(TRACER_NAME)
    links = []
    if link_to:
        linked = trace.get_current_span(_context_of(link_to)).get_span_context()
        if linked.is_valid:
            links.append(Link(linked))
    with tracer.start_as_current_span(
        name,
        context=_context_of(parent) if parent else None,
        kind=SpanKind.CONSUMER if kind_consumer else SpanKind.INTERNAL,
        attributes=dict(attributes or {}),
        links=links,
    ):
        yield current_traceparent()


def server_span(name: str, attributes: Mapping[str, str]) -> Any | None:
    """A started SERVER span (a request served; the caller ends it, and makes it current with
    `current`), or None where `span` makes none."""
    if _skipped():
        return None
    tracer = trace.get_tracer(TRACER_NAME)
    return tracer.start_span(name, kind=SpanKind.SERVER, attributes=dict(attributes))


def current(started: Any) -> contextlib.AbstractContextManager[Any]:
    """`started` (a server_span) as the current span for the block, not ended by it; an
    exception leaving the block is recorded on it."""
    return trace.use_span(started, end_on_exit=False)


def spans_made() -> bool:
    """Whether spans made now would record anything: tracing is on and a tracer provider is
    set. Without a provider a span is a copy of its parent's context that records nothing
    (`span` skips it when there is no parent either), so a caller about to make many of them
    may leave them all out. Cheaper than `span`'s own test: the current context is not read."""
    return ENABLED and not _unconfigured()


def lazy_span(
    name: str, attributes: Callable[[], Mapping[str, str | int]]
) -> contextlib.AbstractContextManager[str | None]:
    """`span`, with attributes built only when a span is made (this runs per operation)."""
    if _skipped():
        return _OFF
    return _span(name, attributes(), None, None, False)


def step_span(
    record: InstanceRecord, workflow: str, action: str, attempt: int
) -> contextlib.AbstractContextManager[str | None]:
    """The span of one step of `record`: a child of the span that enqueued it, linked to its
    first failed attempt's span on a retry. Its attributes are built only when tracing is on
    (this runs for every step). With no tracer provider set and no enqueue's context to carry
    on, no span (it would carry no context)."""
    if not ENABLED or (record.trace_context is None and _unconfigured()):
        return _OFF
    return _span(
        f"laneway.step {workflow}.{action}",
        {
            "laneway.workflow": record.name,
            "laneway.instance_id": str(record.instance_id),
            "laneway.queue": record.queue,
            "laneway.action": action,
            "laneway.attempt": attempt,
        },
        record.trace_context,  # the enqueue's span, in whatever process it was
        record.first_failed_trace if attempt > 1 else None,
        True,
    )


def mark_failed(description: str) -> None:
    """Set the current span's status to error (a failed attempt that raised nothing here)."""
    if not ENABLED:
        return
    current: Span = trace.get_current_span()
    current.set_status(Status(StatusCode.ERROR, description))
