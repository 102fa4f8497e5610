"""OpenTelemetry traces of enqueues, claims, steps and operations, when the extra is installed.

Owns the spans the engine makes and the trace contexts it keeps with instances (W3C
traceparent strings: migrations/0018_traces.sql). An enqueue's context is stored with its
instance, so the spans of its steps, in whatever process runs them, are children of the span
that enqueued it; a retried step's span, and any later step's, links to the span of the
instance's first failed attempt. An instance enqueued untraced gets the context of its first
traced step instead (a root span; the step's own write keeps it: runner.py, migrations/0033),
so its later steps join that step's trace. A claim's span links to the trace of each
instance it claimed, and each step's span to the claim that started its run. The process's
tracer provider is the application's to configure (the SDK, an exporter); Laneway only uses
the API.

`pip install laneway[otel]` brings the OpenTelemetry API and SDK; without them `AVAILABLE`
is False and every helper here returns at once. Whether a process traces is its settings'
(Settings.tracing, from LANEWAY_TRACING): the engine passes its `tracing` to `span` and
`step_span` as `on`, a template's operations are spans only inside a traced step
(`in_traced_step`), and the GraphQL extension asks the request's settings (spans.py). Off:
no span, no context, nothing on the hot path but that test.

Tracing never fails the work it watches: every call into the tracer provider's code (a span
processor's on_start and on_end run inside start and end) is caught here, logged once per
kind of call in the process, and the work goes on, untraced where the span could not start.
"""

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from laneway.model import InstanceRecord

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the extra is not installed
    trace = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)


AVAILABLE = trace is not None  # the extra is installed
TRACER_NAME = "laneway"
_PROPAGATOR = TraceContextTextMapPropagator() if AVAILABLE else None
# Set in the context of a step's span, to the span: a template's operations are its children.
_STEP = otel_context.create_key("laneway-step") if AVAILABLE else ""
# How many steps' spans are current (`current(step=True)`) in some task now. A step's span ends
# as soon as it stops being current, so while none is, a step span still found in a context (a
# task made inside a step outlives it) records nothing: in_traced_step need not read it.
_current_steps = 0


def current_traceparent() -> str | None:
    """The traceparent of the current span (None when there is none, or tracing is off)."""
    if _PROPAGATOR is None:
        return None
    carrier: dict[str, str] = {}
    try:
        _PROPAGATOR.inject(carrier)
    except Exception as error:  # a span of the provider's that cannot give its context
        _report("context", error)
        return None
    return carrier.get("traceparent")


def _context_of(traceparent: str | None) -> Any:
    assert _PROPAGATOR is not None
    return _PROPAGATOR.extract({"traceparent": traceparent}) if traceparent else None


def _linked(traceparent: str | None) -> Any | None:
    """The span context a traceparent names, or None (no traceparent, or not a valid one)."""
    if not traceparent:
        return None
    linked = trace.get_current_span(_context_of(traceparent)).get_span_context()
    return linked if linked.is_valid else None


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


def _skipped(on: bool, parent: Any = None) -> bool:
    """Whether `span` makes no span: tracing is off (`on` False, or no extra), or no provider
    is set and there is no parent span, current or given (such a span would carry no
    context)."""
    return not (on and AVAILABLE) or (
        _unconfigured() and not trace.get_current_span(parent).get_span_context().is_valid
    )


def enqueue_span(
    name: str, attributes: Mapping[str, str | int], *, on: bool
) -> contextlib.AbstractContextManager[str | None]:
    """The span of an enqueue (`name`: one or a batch), a child of the current span; an
    exception leaving the block is recorded on it. Yields the span's own traceparent, which
    the instances enqueued keep: the messaging conventions' creation context, so a PRODUCER
    span, as each step's is a CONSUMER's. When tracing is off (`on`: the engine's settings):
    one shared no-op context that yields None, as when no tracer provider is set and there is
    no current span (such a span would carry no context)."""
    if _skipped(on):
        return _OFF
    return _span(name, attributes, None, (), False, producer=True)


@contextlib.contextmanager
def _span(
    name: str,
    attributes: Mapping[str, str | int] | None,
    parent: str | None,
    link_to: Sequence[str | None],
    step: bool,
    *,
    producer: bool = False,
) -> Iterator[str | None]:
    """The span of `enqueue_span` (a PRODUCER), `lazy_span` and `step_span` (a CONSUMER):
    started, current for the block, ended; linked to the spans `link_to` names. A call that
    raises is reported (`_report`) and the block goes on, untraced if the span did not
    start."""
    try:
        links = [Link(linked) for linked in map(_linked, link_to) if linked is not None]
        # A step with no trace to join starts one (an empty context), whatever span its task
        # inherited; any other span is a child of the current one.
        root = otel_context.Context() if step else None
        made = trace.get_tracer(TRACER_NAME).start_span(
            name,
            context=_context_of(parent) if parent else root,
            kind=SpanKind.CONSUMER
            if step
            else SpanKind.PRODUCER
            if producer
            else SpanKind.INTERNAL,
            attributes=dict(attributes or {}),
            links=links,
        )
    except Exception as error:
        _report("start", error)
        yield None  # the block runs untraced
        return
    try:
        with current(made, step=step):
            yield current_traceparent()
    finally:
        _end(made)


def _kind(step: bool, producer: bool) -> Any:
    if step:
        return SpanKind.CONSUMER
    return SpanKind.PRODUCER if producer else SpanKind.INTERNAL


def server_span(name: str, headers: Mapping[str, str] | None = None) -> Any | None:
    """A started SERVER span (a request served; the caller ends it with `finish`, and makes it
    current with `current`), or None where `span` makes none or it could not start. The
    caller asks only when its settings trace.

    `headers`: the HTTP request's. With no span current (no middleware of a host's has
    continued the caller's trace already), the caller's trace context in them (`traceparent`,
    read by the configured propagators) is the span's parent: the request continues the
    trace of the service that sent it."""
    parent = None
    try:
        if headers is not None and not trace.get_current_span().get_span_context().is_valid:
            parent = propagate.extract(headers, otel_context.get_current())
    except Exception as error:  # a propagator of the application's that raised
        _report("context", error)
    if _skipped(True, parent):
        return None
    try:
        tracer = trace.get_tracer(TRACER_NAME)
        return tracer.start_span(name, context=parent, kind=SpanKind.SERVER)
    except Exception as error:
        _report("start", error)
        return None


@contextlib.contextmanager
def current(started: Any, *, step: bool = False) -> Iterator[None]:
    """`started` (a span started here, a server_span) as the current span for the block, not
    ended by it (and as the current step's, `step`); an exception leaving the block is
    recorded on it (as the API's `use_span` does), and propagates as it was, whatever
    recording it does."""
    global _current_steps
    context = trace.set_span_in_context(started)
    token = otel_context.attach(
        otel_context.set_value(_STEP, started, context) if step else context
    )
    _current_steps += step
    try:
        yield
    except Exception as error:
        try:
            recording = started.is_recording()
        except Exception as failure:
            _report("status", failure)
            recording = False
        if recording:
            try:
                description = f"{type(error).__name__}: {error}"
            except Exception:  # its __str__ raised
                description = type(error).__name__
            _failed(started, description, error)
        raise
    finally:
        _current_steps -= step
        otel_context.detach(token)


def finish(started: Any, name: str | None, attributes: Mapping[str, str]) -> None:
    """Rename `started` (a server_span, unless `name` is None), set `attributes` on it and
    end it."""
    try:
        if name is not None:
            started.update_name(name)
        started.set_attributes(dict(attributes))
    except Exception as error:
        _report("attributes", error)
    _end(started)


def _end(started: Any) -> None:
    try:
        started.end()  # a span processor's on_end runs here
    except Exception as error:
        _report("end", error)


# The kinds of call ("start", "end", ...) whose failure this process has logged. A broken
# processor or exporter fails every span the same way, and the tracer provider is the
# process's (OpenTelemetry's global), so once per kind per process says all there is to say.
_reported: set[str] = set()


def _report(call: str, error: Exception) -> None:
    """Log that a call into the tracing code raised, the first time a call of its kind does."""
    if call in _reported:
        return
    _reported.add(call)
    logger.error(
        "tracing call failed; the work goes on (logged once per kind of call)",
        exc_info=error,
        extra={"tracing_call": call},
    )


def in_traced_step() -> bool:
    """Whether the block runs inside a step's span that records, so that a template's
    operations are spans (its children). A step not traced (its engine's tracing off, no
    provider set, not sampled) leaves them out, whatever span is current around it. Asked
    once per stage: the context is read, no span is made."""
    if not AVAILABLE or not _current_steps:  # no step traced anywhere (tracing off: always)
        return False
    step: Any = otel_context.get_value(_STEP)
    try:
        return step is not None and bool(step.is_recording())
    except Exception as error:
        _report("context", error)
        return False


def lazy_span(
    name: str, attributes: Callable[[], Mapping[str, str | int]]
) -> contextlib.AbstractContextManager[str | None]:
    """A span around the block, a child of the current step's, with attributes built only
    now; called where `in_traced_step` said yes (this runs per operation)."""
    return _span(name, attributes(), None, (), False)


def step_span(
    record: InstanceRecord,
    workflow: str,
    action: str,
    claimed_by: str | None,
    *,
    on: bool,
) -> contextlib.AbstractContextManager[str | None]:
    """The span of one step of `record` (as its run's claim read it): a child of the span that
    enqueued it, linked to its first failed attempt's span once it has one, then to the span
    of the claim that started its run (`claimed_by`). Its attributes are built only when
    tracing is on (`on`: the engine's settings; this runs for every step). With no tracer
    provider set and no enqueue's context to carry on, no span (it would carry no context).

    Its attempt is the instance's (`attempts`, counted by each claim), as `failures`, events
    and logs number them: not the step's within its budget, which a retry, a resume or the
    next step starts again at 1. So is the link: any attempt after a failed one (the first
    failure's span, kept with the instance: migrations/0018), whatever budget it is in."""
    if not (on and AVAILABLE) or (record.trace_context is None and _unconfigured()):
        return _OFF
    return _span(
        f"laneway.step {workflow}.{action}",
        {
            "laneway.workflow": record.name,
            "laneway.instance_id": str(record.instance_id),
            "laneway.queue": record.queue,
            "laneway.action": action,
            "laneway.attempt": record.attempts,
        },
        record.trace_context,  # the enqueue's span, in whatever process it was
        (record.first_failed_trace, claimed_by),
        True,
    )


# A claim is a batch consumer's receive: its span links to the trace of each instance it
# claimed (the enqueue's span, as messaging conventions link a receive to each message's
# creation context), and each step of a run it started links back to it (runner.py), while
# staying in its own instance's trace.


def _claim_links(claimed: Sequence[InstanceRecord]) -> list[Any]:
    """A link to the trace of each claimed instance that has one, naming the instance."""
    return [
        Link(linked, {"laneway.instance_id": str(record.instance_id)})
        for record in claimed
        if (linked := _linked(record.trace_context)) is not None
    ]


def claim_span(started_ns: int, limit: int, claimed: Sequence[InstanceRecord]) -> str | None:
    """The span of a claim, from `started_ns` (when it was sent: by the loop, or with a group
    commit, in its transaction) until now, that claimed `claimed`: a trace of its own (a
    commit's task may have been made inside any step), linked to each claimed instance's
    trace, a CLIENT span (a receive, in the messaging conventions). Made once it is known to
    have claimed something: a claim that finds nothing makes none (most claims of a crowd of
    idle workers, each woken by one enqueue, find nothing). Returns its traceparent, for its
    runs' steps to link to (None where no tracer provider is set, or it could not be made)."""
    if not AVAILABLE or _unconfigured():  # as `enqueue_span` with no current span
        return None
    try:
        made = trace.get_tracer(TRACER_NAME).start_span(
            "laneway.claim",
            context=otel_context.Context(),
            kind=SpanKind.CLIENT,
            attributes={"laneway.limit": limit, "laneway.count": len(claimed)},
            links=_claim_links(claimed),
            start_time=started_ns,
        )
    except Exception as error:
        _report("start", error)
        return None
    with current(made):
        traceparent = current_traceparent()
    _end(made)
    return traceparent


def annotate(attributes: Mapping[str, str | int]) -> None:
    """Set `attributes` on the current span, once they are known (an enqueue's instance id,
    after its row is written); called only inside a span made here (one that yielded a
    traceparent)."""
    try:
        trace.get_current_span().set_attributes(dict(attributes))
    except Exception as error:
        _report("attributes", error)


def mark_failed(description: str, error: BaseException | None = None) -> None:
    """Set the current span's status to error (a failed attempt that raised nothing here),
    and record `error`, the exception it failed with if any, as `current` records one that
    leaves its block (an `exception` event: type, message, traceback); called only inside a
    span made here (one that yielded a traceparent)."""
    if not AVAILABLE:
        return
    try:
        failed: Span = trace.get_current_span()
    except Exception as broken:
        _report("status", broken)
        return
    _failed(failed, description, error)


def _failed(span: Any, description: str, error: BaseException | None) -> None:
    """Set `span`'s status to error, then record `error` on it. The status comes first: the
    SDK reads str(error), and a broken __str__ of the user's leaves the span without its
    exception event (a failure keeps its message anyway), not without its status; it is no
    fault of tracing's, so it is not reported as one."""
    try:
        span.set_status(Status(StatusCode.ERROR, description))
    except Exception as broken:
        _report("status", broken)
        return
    if error is not None:
        with contextlib.suppress(Exception):
            span.record_exception(error)
