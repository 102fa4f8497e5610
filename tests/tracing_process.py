"""One side of the tracing test, run as its own process with the OpenTelemetry SDK and an
in-memory exporter: `enqueue` (a request span that enqueues `flaky` with one failure, then
prints the instance id), `graphql` (an enqueueWorkflows mutation through the schema),
`documents` (operations with literal arguments, a long name, documents that do not parse),
`template` (a template instance enqueued under a request span and run here),
`work INSTANCE_ID` (an engine that runs it to completion) or `untraced` (instances enqueued
by an engine that does not trace, run by one that does; `review` is left paused) and
`resume INSTANCE_ID` (resumes it and runs it to completion) or `claims` (instances claimed one
at a time, by the loop and by group commits) or `broken on_start|on_end` (with
a span processor that raises there for Laneway's spans: instances enqueued and run, their
outcomes and the tracing module's log lines printed) or `off settings|environment` (the same
work inside a host's span, with tracing off in the settings, or in LANEWAY_TRACING read
through Settings.from_env) or `caller` (GraphQL over HTTP: with a caller's `traceparent`,
with an invalid one, with none). Each prints its finished spans as JSON
lines: name, trace and span ids, parent, links, attributes.

Run as `python -m tests.tracing_process enqueue|graphql|documents|template|caller|untraced`,
`claims`, `failures`,
`work ID`, `resume ID` (or
`broken HOOK`, `off SOURCE`) with TRACING_DATABASE_URL set.
"""

import asyncio
import json
import logging
import os
import sys
from uuid import UUID

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app.examples import flaky, review
from laneway import (
    Done,
    HandlerContext,
    Operation,
    OperationContext,
    OperationRegistry,
    OperationResult,
    Pause,
    RetryPolicy,
    Stage,
    Template,
    Workflow,
    compile_template,
    completed,
)
from laneway.config import Settings
from laneway.model import JSONValue, Status
from laneway.services import open_services
from laneway.store import open_store
from tests.api.conftest import executor, live_server, make_settings
from tests.engine.helpers import make_engine, until_status, watch_claims

EXPORTER = InMemorySpanExporter()


def _dump() -> None:
    for finished in EXPORTER.get_finished_spans():
        context = finished.get_span_context()
        assert context is not None
        print(
            json.dumps(
                {
                    "name": finished.name,
                    "trace_id": f"{context.trace_id:032x}",
                    "span_id": f"{context.span_id:016x}",
                    "parent_id": f"{finished.parent.span_id:016x}" if finished.parent else None,
                    "links": [f"{link.context.span_id:016x}" for link in finished.links],
                    "kind": finished.kind.name,
                    "status": finished.status.status_code.name,
                    "attributes": dict(finished.attributes or {}),
                    "events": [
                        {"name": event.name, "attributes": dict(event.attributes or {})}
                        for event in finished.events
                    ],
                }
            ),
            flush=True,
        )


MUTATION = (
    "mutation Many($requests: [EnqueueInput!]!) { enqueueWorkflows(requests: $requests)"
    " { instanceID created } }"
)


async def _graphql() -> None:
    settings = make_settings(os.environ["TRACING_DATABASE_URL"], engine_enabled=False)
    async with open_services(settings) as services:
        run = executor(services)
        requests = [{"name": "flaky", "params": {"failTimes": 0, "secret": "s"}}] * 2
        result = await run(MUTATION, requests=requests)
        assert result.errors is None, result.errors
        assert result.data is not None
        for answer in result.data["enqueueWorkflows"]:
            print(json.dumps({"instance_id": answer["instanceID"]}), flush=True)


LONG_NAME = "N" * 5000
SECRET = "hunter2"
DOCUMENTS = [
    'mutation Inline { enqueueWorkflow(name: "flaky",'
    f' params: {{failTimes: 0, password: "{SECRET}"}}) {{ instanceID }} }}',
    "mutation Batch { enqueueWorkflows(requests: ["
    + ", ".join(
        f'{{name: "flaky", params: {{failTimes: 0, pad: "{"p" * 2000}"}}}}' for _ in range(4)
    )
    + "]) { instanceID } }",
    f"query {LONG_NAME} {{ __typename }}",
    "query Refused { " + "__typename " * 3000 + "}",  # past the token limit: never parsed
    "query Broken {",
]


async def _documents() -> None:
    settings = make_settings(os.environ["TRACING_DATABASE_URL"], engine_enabled=False)
    async with open_services(settings) as services:
        run = executor(services)
        for document in DOCUMENTS:
            result = await run(document)
            print(json.dumps({"errors": bool(result.errors)}), flush=True)


async def _noted(ctx: OperationContext) -> OperationResult:
    await asyncio.sleep(0)
    return completed({ctx.operation_type: ctx.attempt})


TRACED_TEMPLATE = compile_template(
    Template(
        type="traced",
        stages=[
            Stage(name="fan", parallel=True, operations=[Operation(type="a"), Operation(type="b")]),
            Stage(name="last", operations=[Operation(type="c")]),
        ],
    ),
    OperationRegistry({"a": _noted, "b": _noted, "c": _noted}),
)


async def _template() -> None:
    async with open_store(os.environ["TRACING_DATABASE_URL"]) as store:
        engine = make_engine(store, TRACED_TEMPLATE, poll_interval_seconds=0.05)
        with trace.get_tracer("test").start_as_current_span("request"):
            enqueued = await engine.enqueue("traced", {})
        async with engine.running():
            await until_status(store, enqueued.instance_id, Status.COMPLETED, timeout=30)
        print(json.dumps({"instance_id": str(enqueued.instance_id)}), flush=True)


class BrokenProcessor(SpanProcessor):
    """Raises in `hook` (on_start or on_end) for every span of Laneway's, as a processor with
    a bug would (an exporter's failures the SDK's own processors catch)."""

    def __init__(self, hook: str) -> None:
        self.hook = hook

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self._raise("on_start", span)

    def on_end(self, span: ReadableSpan) -> None:
        self._raise("on_end", span)

    def _raise(self, hook: str, span: ReadableSpan) -> None:
        scope = span.instrumentation_scope
        if hook == self.hook and scope is not None and scope.name == "laneway":
            raise RuntimeError(f"processor broken in {hook}")


class PrintedLogs(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        call = getattr(record, "tracing_call", None)
        print(json.dumps({"log": record.getMessage(), "call": call}), flush=True)


async def _broken() -> None:
    """Every kind of span Laneway makes, under a processor that raises: enqueues (one, and a
    batch through GraphQL), claims, steps (a failed attempt and its retry), operations."""
    settings = make_settings(os.environ["TRACING_DATABASE_URL"])
    await _every_kind_of_span(settings)


async def _off(source: str) -> None:
    """The same work with tracing off, inside a span of the host's own."""
    url = os.environ["TRACING_DATABASE_URL"]
    if source == "settings":
        settings = make_settings(url, tracing=False)
    else:
        settings = Settings.from_env({**os.environ, "DATABASE_URL": url})
        assert settings.tracing is False
    with trace.get_tracer("test").start_as_current_span("host"):
        await _every_kind_of_span(settings)


CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"


async def _caller() -> None:
    settings = make_settings(os.environ["TRACING_DATABASE_URL"], engine_enabled=False)
    enqueue = (
        'mutation From{name} {{ enqueueWorkflow(name: "flaky", params: {{failTimes: 0}})'
        " {{ instanceID }} }}"
    )
    headers = {
        "Caller": {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"},
        "Garbled": {"traceparent": "00-not-a-trace-01"},
        "Nobody": {},
    }
    async with live_server(settings) as server:
        for name, sent in headers.items():
            response = await server.client.post(
                "/graphql", json={"query": enqueue.format(name=name)}, headers=sent
            )
            assert response.status_code == 200, response.text
            assert "errors" not in response.json(), response.text


async def _untraced() -> None:
    """Instances enqueued untraced (this engine's tracing off, inside a request's span that
    must not become theirs), then run here by an engine that traces: `flaky` failing once and
    not at all, the `traced` template, and `review` (paused; `resume ID` finishes it). Prints
    each instance's id and the trace context kept with it."""
    async with open_store(os.environ["TRACING_DATABASE_URL"]) as store:
        workflows = (flaky, review, TRACED_TEMPLATE)
        untraced = make_engine(store, *workflows, tracing=False)
        with trace.get_tracer("test").start_as_current_span("request"):
            enqueued = [
                await untraced.enqueue("flaky", {"failTimes": 1}),
                await untraced.enqueue("flaky", {"failTimes": 0}),
                await untraced.enqueue("traced", {}),
                await untraced.enqueue("review", {}),
            ]
        engine = make_engine(store, *workflows, poll_interval_seconds=0.05)
        async with engine.running():
            statuses = [Status.COMPLETED] * 3 + [Status.PAUSED]
            for answer, status in zip(enqueued, statuses, strict=True):
                await until_status(store, answer.instance_id, status, timeout=30)
        for answer in enqueued:
            record = await store.get_instance(answer.instance_id)
            assert record is not None
            line = {"instance_id": str(record.instance_id), "workflow": record.name}
            print(json.dumps(line | {"trace_context": record.trace_context}), flush=True)


async def _claims() -> None:
    """Three `flaky` instances, each enqueued under a request span of its own, run one at a
    time (concurrency 1): the loop claims the first, and each commit that ends a run claims
    the next in its own transaction; then a fourth, delayed, whose enqueue wakes the idle loop
    for a claim that finds nothing (no span) until it is due. Prints the instance ids, and
    how many instances each claim that rode on a commit took."""
    async with open_store(os.environ["TRACING_DATABASE_URL"]) as store:
        engine = make_engine(store, flaky, poll_interval_seconds=0.05, concurrency=1)
        ids = []
        for _ in range(3):
            with trace.get_tracer("test").start_as_current_span("request"):
                ids.append((await engine.enqueue("flaky", {"failTimes": 0})).instance_id)
        seen = watch_claims(store)
        async with engine.running():
            for instance_id in ids:
                await until_status(store, instance_id, Status.COMPLETED, timeout=30)
            with trace.get_tracer("test").start_as_current_span("request"):
                later = await engine.enqueue("flaky", {"failTimes": 0}, delay_ms=300)
            ids.append(later.instance_id)
            await until_status(store, later.instance_id, Status.COMPLETED, timeout=30)
        for instance_id in ids:
            print(json.dumps({"instance_id": str(instance_id)}), flush=True)
        print(json.dumps({"rides": seen.rides}), flush=True)


async def _resume(instance: str) -> None:
    async with open_store(os.environ["TRACING_DATABASE_URL"]) as store:
        engine = make_engine(store, review, poll_interval_seconds=0.05)
        async with engine.running():
            await engine.resume(UUID(instance), {"decision": "approve"})
            await until_status(store, UUID(instance), Status.COMPLETED, timeout=30)


def _missing(found: dict[str, JSONValue]) -> JSONValue:
    return found["missing"]


async def _boom(ctx: HandlerContext, params: JSONValue) -> Done:
    _missing({})
    return Done(None)


BOOM = Workflow(
    "boom",
    handlers={"start": _boom},
    initial="start",
    retry=RetryPolicy(max_attempts=2, backoff="fixed", base_ms=50),
)


async def _trip(ctx: HandlerContext, params: JSONValue) -> Pause:
    if ctx.attempt == 1:
        raise RuntimeError("tripped once")
    return Pause("check", "after")


async def _after(ctx: HandlerContext, params: JSONValue) -> Done:
    return Done(None)


TRIPPED = Workflow(
    "tripped",
    handlers={"trip": _trip, "after": _after},
    initial="trip",
    retry=RetryPolicy(max_attempts=2, backoff="fixed", base_ms=50),
)


async def _explode(ctx: OperationContext) -> OperationResult:
    raise RuntimeError("check exploded")


EXPLODING = compile_template(
    Template(
        type="exploding",
        stages=[Stage(name="verify", operations=[Operation(type="check", max_attempts=1)])],
        retry=RetryPolicy(max_attempts=1),
    ),
    OperationRegistry({"check": _explode}),
)


async def _failures() -> None:
    """`boom` failing both attempts, retried by hand and failing both again; `tripped`
    failing once, then paused, resumed and completed; `exploding`, whose operation raises.
    Prints each instance's id and the attempts its `failures` number."""
    async with open_store(os.environ["TRACING_DATABASE_URL"]) as store:
        engine = make_engine(store, BOOM, TRIPPED, EXPLODING, poll_interval_seconds=0.05)
        async with engine.running():
            boom = (await engine.enqueue("boom", {})).instance_id
            await until_status(store, boom, Status.FAILED, timeout=30)
            await engine.retry(boom)
            await until_status(store, boom, Status.FAILED, timeout=30)
            tripped = (await engine.enqueue("tripped", {})).instance_id
            await until_status(store, tripped, Status.PAUSED, timeout=30)
            await engine.resume(tripped)
            await until_status(store, tripped, Status.COMPLETED, timeout=30)
            exploding = (await engine.enqueue("exploding", {})).instance_id
            await until_status(store, exploding, Status.FAILED, timeout=30)
        found = await store.failures([boom, tripped, exploding], 10)
        for instance_id, failures in found.items():
            attempts = sorted(failure.attempt for failure in failures)
            print(json.dumps({"instance_id": str(instance_id), "failed": attempts}), flush=True)


async def _every_kind_of_span(settings: Settings) -> None:
    async with open_services(settings, workflows=[TRACED_TEMPLATE]) as services:
        engine = services.engine
        enqueued = [await engine.enqueue("flaky", {"failTimes": 1})]
        enqueued.append(await engine.enqueue("traced", {}))
        requests = [{"name": "flaky", "params": {"failTimes": 0}}]
        result = await executor(services)(MUTATION, requests=requests)
        assert result.errors is None, result.errors
        assert result.data is not None
        ids = [answer.instance_id for answer in enqueued]
        ids += [UUID(answer["instanceID"]) for answer in result.data["enqueueWorkflows"]]
        async with engine.running():
            for instance_id in ids:
                await until_status(services.store, instance_id, Status.COMPLETED, timeout=30)
        for record in await engine.list_instances():
            print(json.dumps({"workflow": record.name, "attempts": record.attempts}), flush=True)


async def main(role: str, instance: str | None) -> None:
    if role == "broken":
        await _broken()
        _dump()
        return
    if role == "caller":
        await _caller()
        _dump()
        return
    if role == "off":
        assert instance is not None
        await _off(instance)
        _dump()
        return
    if role == "claims":
        await _claims()
        _dump()
        return
    if role in ("untraced", "resume"):
        await (_untraced() if instance is None else _resume(instance))
        _dump()
        return
    if role == "failures":
        await _failures()
        _dump()
        return
    if role == "template":
        await _template()
        _dump()
        return
    if role == "documents":
        await _documents()
        _dump()
        return
    if role == "graphql":
        await _graphql()
        _dump()
        return
    async with open_store(os.environ["TRACING_DATABASE_URL"]) as store:
        engine = make_engine(store, flaky, poll_interval_seconds=0.05)
        if role == "enqueue":
            with trace.get_tracer("test").start_as_current_span("request"):
                enqueued = await engine.enqueue("flaky", {"failTimes": 1})
            print(json.dumps({"instance_id": str(enqueued.instance_id)}), flush=True)
        else:
            assert instance is not None
            async with engine.running():
                await until_status(store, UUID(instance), Status.COMPLETED, timeout=30)
    _dump()


if __name__ == "__main__":
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    if sys.argv[1] == "broken":
        provider.add_span_processor(BrokenProcessor(sys.argv[2]))
        logging.getLogger("laneway.engine.tracing").addHandler(PrintedLogs())
    trace.set_tracer_provider(provider)
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
