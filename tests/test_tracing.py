"""OpenTelemetry traces across two processes (issue #20, point 2): the steps' spans, run by a
worker process, belong to the trace of the request that enqueued the instance in another; a
retried attempt's span links to the first attempt's; every span carries the workflow,
instance, queue and attempt; a failed attempt's span records its exception. A claim links to
the traces of what it claimed, and their steps link to it. An instance enqueued untraced is
one trace, from its first traced step. Each process uses the SDK's in-memory exporter
(tests/tracing_process.py)."""

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from laneway.api.graphql.spans import MAX_DOCUMENT_CHARS, MAX_NAME_CHARS
from laneway.config import Settings
from laneway.errors import InvalidInputError
from tests.processes import run_process
from tests.tracing_process import CALLER_SPAN, CALLER_TRACE

ROOT = Path(__file__).resolve().parents[1]


async def _side(database_url: str, *args: str) -> list[dict[str, Any]]:
    env = {"PATH": "/usr/bin:/bin", "TRACING_DATABASE_URL": database_url, "PYTHONPATH": str(ROOT)}
    if args == ("off", "environment"):  # as `laneway worker` reads it
        env |= {"LANEWAY_TRACING": "0", "LANEWAY_WORKFLOWS": "app.examples,tests.workflows"}
        env |= {"LANEWAY_POLL_SECONDS": "0.05", "LANEWAY_LEASE_SECONDS": "5"}
    code, out, err = await run_process(
        [sys.executable, "-m", "tests.tracing_process", *args], cwd=ROOT, env=env, timeout=60
    )
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines() if line.strip()]


async def test_steps_in_another_process_belong_to_the_enqueues_trace(database_url: str) -> None:
    enqueuing = await _side(database_url, "enqueue")
    instance_id = next(line["instance_id"] for line in enqueuing if "instance_id" in line)
    spans = {line["name"]: line for line in enqueuing if "name" in line}
    request, enqueue = spans["request"], spans["laneway.enqueue"]
    assert enqueue["parent_id"] == request["span_id"]
    assert enqueue["attributes"] == {
        "laneway.workflow": "flaky",
        "laneway.queue": "flaky",
        "laneway.instance_id": instance_id,  # set once the row is written
        "laneway.created": True,  # an idempotent enqueue's names the older instance: False
    }
    assert enqueue["kind"] == "PRODUCER"  # the messaging conventions' creation context

    working = await _side(database_url, "work", instance_id)
    steps = [line for line in working if line["name"] == "laneway.step flaky.attempt"]
    assert len(steps) == 2  # one failed attempt, then the one that completed
    first, retry = steps
    for step in steps:
        assert step["trace_id"] == request["trace_id"]  # the request's trace, across processes
        assert step["parent_id"] == enqueue["span_id"]
        assert step["attributes"]["laneway.instance_id"] == instance_id
        assert step["attributes"]["laneway.queue"] == "flaky"
    assert [s["attributes"]["laneway.attempt"] for s in steps] == [1, 2]
    claims = {line["span_id"]: line for line in working if line.get("name") == "laneway.claim"}
    # A receive (CLIENT), and only for a claim that took something: an idle worker's claims
    # that find nothing are no spans.
    assert {claim["kind"] for claim in claims.values()} == {"CLIENT"}
    assert all(claim["attributes"]["laneway.count"] >= 1 for claim in claims.values())
    assert {step["kind"] for step in steps} == {"CONSUMER"}  # a process
    # Each attempt links to the claim that started its run; the retry links to the first
    # attempt first. The claim is a trace of its own, linked to the instance's trace.
    assert [link in claims for link in first["links"]] == [True]
    assert retry["links"][0] == first["span_id"]
    assert [link in claims for link in retry["links"][1:]] == [True]
    for step in steps:
        claim = claims[step["links"][-1]]
        assert claim["links"] == [enqueue["span_id"]]
        assert claim["attributes"]["laneway.count"] == 1
        assert claim["trace_id"] != step["trace_id"]


async def test_a_claim_links_to_what_it_claimed_and_their_steps_link_to_it(
    database_url: str,
) -> None:
    lines = await _side(database_url, "claims")
    (rides,) = [line["rides"] for line in lines if "rides" in line]
    assert sum(rides) >= 1  # a claim rode on a group commit, and is a span too
    ids = [line["instance_id"] for line in lines if "instance_id" in line]
    spans = [line for line in lines if "name" in line]
    claims = {s["span_id"]: s for s in spans if s["name"] == "laneway.claim"}
    enqueues = {
        s["attributes"]["laneway.instance_id"]: s for s in spans if s["name"] == "laneway.enqueue"
    }
    steps = {
        s["attributes"]["laneway.instance_id"]: s
        for s in spans
        if s["name"].startswith("laneway.step ")
    }
    assert set(steps) == set(ids)
    for instance_id, step in steps.items():
        # The claim is the batch's receive span: linked to each claimed instance's trace
        # (its enqueue's span). The step stays in the instance's trace and links to the claim.
        assert step["parent_id"] == enqueues[instance_id]["span_id"]
        (claimed_by,) = step["links"]
        claim = claims[claimed_by]
        assert enqueues[instance_id]["span_id"] in claim["links"]
        assert claim["attributes"]["laneway.count"] == len(claim["links"])
    assert len({step["links"][0] for step in steps.values()}) == 4  # one claim each
    # The claim that the delayed instance's enqueue woke found nothing, and is no span.
    assert len(claims) == 4


async def test_an_instance_enqueued_untraced_is_one_trace_from_its_first_step(
    database_url: str,
) -> None:
    lines = await _side(database_url, "untraced")
    kept = {line["instance_id"]: line for line in lines if "trace_context" in line}
    spans = [line for line in lines if line.get("name", "").startswith("laneway.step ")]
    failing, passing, template, paused = kept
    resumed = await _side(database_url, "resume", paused)
    spans += [line for line in resumed if line.get("name", "").startswith("laneway.step ")]
    traces = set()
    for instance_id, expected in (
        (failing, ["flaky.attempt", "flaky.attempt"]),
        (passing, ["flaky.attempt"]),
        (template, ["traced.fan", "traced.last"]),
        (paused, ["review.ask", "review.decided"]),  # the second step in another process
    ):
        steps = [s for s in spans if s["attributes"]["laneway.instance_id"] == instance_id]
        assert [s["name"] for s in steps] == [f"laneway.step {name}" for name in expected]
        first, *later = steps
        # Its first step is a trace of its own (not the enqueuing request's, nor another
        # instance's), kept with the instance as an enqueue's would be; every later step,
        # retry and other process included, is its child.
        assert first["parent_id"] is None
        assert kept[instance_id]["trace_context"].startswith(
            f"00-{first['trace_id']}-{first['span_id']}-"
        )
        for step in later:
            assert (step["trace_id"], step["parent_id"]) == (first["trace_id"], first["span_id"])
        traces.add(first["trace_id"])
    assert len(traces) == 4
    assert not any(line.get("name") == "laneway.enqueue" for line in lines)


async def test_a_graphql_operation_is_the_parent_of_its_enqueues(database_url: str) -> None:
    lines = await _side(database_url, "graphql")
    assert len([line for line in lines if "instance_id" in line]) == 2
    spans = [line for line in lines if "name" in line]
    (operation,) = [span for span in spans if span["name"] == "mutation Many"]
    assert operation["kind"] == "SERVER"
    assert operation["parent_id"] is None
    attributes = operation["attributes"]
    assert attributes["graphql.operation.type"] == "mutation"
    assert attributes["graphql.operation.name"] == "Many"
    assert attributes["graphql.document"].startswith("mutation Many(")
    (batch,) = [span for span in spans if span["name"] == "laneway.enqueue_many"]
    assert batch["parent_id"] == operation["span_id"]
    assert batch["trace_id"] == operation["trace_id"]
    assert batch["attributes"]["laneway.count"] == 2
    # Arguments stay out of the spans: no span is made per field, no params are copied in.
    assert not any("secret" in json.dumps(span["attributes"]) for span in spans)
    assert {span["name"] for span in spans} == {"mutation Many", "laneway.enqueue_many"}


async def test_a_templates_operations_are_spans_of_their_stages_step(database_url: str) -> None:
    lines = await _side(database_url, "template")
    (instance_id,) = [line["instance_id"] for line in lines if "instance_id" in line]
    spans = [line for line in lines if "name" in line]
    steps = {s["name"]: s for s in spans if s["name"].startswith("laneway.step traced.")}
    assert set(steps) == {"laneway.step traced.fan", "laneway.step traced.last"}
    operations = {s["name"]: s for s in spans if s["name"].startswith("laneway.operation ")}
    assert set(operations) == {"laneway.operation a", "laneway.operation b", "laneway.operation c"}
    for name, stage in (("a", "fan"), ("b", "fan"), ("c", "last")):
        operation = operations[f"laneway.operation {name}"]
        step = steps[f"laneway.step traced.{stage}"]
        # Parallel ones run in tasks of their own, in copies of the step's context.
        assert operation["parent_id"] == step["span_id"]
        assert operation["trace_id"] == step["trace_id"]
        assert operation["attributes"] == {
            "laneway.workflow": "traced",
            "laneway.instance_id": instance_id,
            "laneway.stage": stage,
            "laneway.operation": name,
            "laneway.attempt": 1,
        }


async def test_without_the_extra_tracing_is_off_and_costs_one_test() -> None:
    script = (
        "import sys; sys.modules['opentelemetry'] = None\n"  # as if the extra were not installed
        "from laneway.engine import tracing\n"
        "assert not tracing.AVAILABLE\n"
        "with tracing.enqueue_span('laneway.enqueue', {'laneway.queue': 'q'}, on=True) as traced:\n"
        "    assert traced is None\n"
        "assert tracing.current_traceparent() is None\n"
        "assert not tracing.in_traced_step()\n"
        "tracing.mark_failed('nothing to mark')\n"
        "import laneway.api.graphql.schema as schema\n"
        "assert schema.OperationSpans not in schema.schema_extensions()\n"
        "print('off')\n"
    )
    code, out, err = await run_process(
        [sys.executable, "-c", script], cwd=ROOT, env={"PATH": "/usr/bin:/bin"}, timeout=60
    )
    assert code == 0, err
    assert out.strip() == "off"


@pytest.mark.parametrize("source", ["settings", "environment"])
async def test_tracing_turned_off_in_the_settings_makes_no_span(
    database_url: str, source: str
) -> None:
    # All of it runs inside an application's own span, as an embedding host's would: no span
    # of Laneway's is its child, and no failed attempt marks it failed.
    lines = await _side(database_url, "off", source)
    outcomes = sorted((line["workflow"], line["attempts"]) for line in lines if "workflow" in line)
    assert outcomes == [("flaky", 1), ("flaky", 2), ("traced", 1)]
    spans = [line for line in lines if "name" in line]
    assert [(span["name"], span["status"]) for span in spans] == [("host", "UNSET")]


@pytest.mark.parametrize("word", ["0", "off", "FALSE", " no "])
def test_laneway_tracing_reads_every_off_word_as_the_other_switches_do(word: str) -> None:
    assert Settings.from_env({"LANEWAY_TRACING": word}).tracing is False
    assert Settings.from_env({"LANEWAY_TRACING": "on"}).tracing is True
    assert Settings.from_env({}).tracing is True


def test_a_tracing_word_that_is_not_a_switch_is_refused_where_settings_are_read() -> None:
    with pytest.raises(
        InvalidInputError, match=r"^LANEWAY_TRACING must be on \(1, true, yes, on\) or off"
    ):
        Settings.from_env({"LANEWAY_TRACING": "maybe"})
    assert Settings.from_env({"LANEWAY_TRACING": "off"}).tracing is False


async def test_an_operations_span_holds_its_document_without_literals_and_bounded(
    database_url: str,
) -> None:
    lines = await _side(database_url, "documents")
    errors = [line["errors"] for line in lines if "errors" in line]
    assert errors == [False, False, False, True, True]
    spans = [line for line in lines if "name" in line]
    assert "hunter2" not in json.dumps(spans)  # an inline password reaches no span
    inline, batch, long, refused, broken = [s for s in spans if s["kind"] == "SERVER"]
    assert inline["name"] == "mutation Inline"
    assert inline["attributes"]["graphql.document"] == (
        'mutation Inline {\n  enqueueWorkflow(name: "*", params: "*") {\n    instanceID\n  }\n}'
    )
    assert batch["name"] == "mutation Batch"
    assert batch["attributes"]["graphql.document"] == (
        'mutation Batch {\n  enqueueWorkflows(requests: "*") {\n    instanceID\n  }\n}'
    )
    # The client's operation name is cut, in the span's name and attribute alike, and a
    # document longer than the cap is cut there.
    assert long["name"] == "query " + "N" * (MAX_NAME_CHARS - 1) + "…"
    assert long["attributes"]["graphql.operation.name"] == long["name"][len("query ") :]
    document = long["attributes"]["graphql.document"]
    assert len(document) == MAX_DOCUMENT_CHARS
    assert document == "query " + "N" * (MAX_DOCUMENT_CHARS - len("query ") - 1) + "…"
    for unparsed in (refused, broken):  # refused before parsing, or not GraphQL
        assert unparsed["name"] == "GraphQL"
        assert unparsed["attributes"] == {}


@pytest.mark.parametrize("hook", ["on_start", "on_end"])
async def test_a_span_processor_that_raises_fails_no_work(database_url: str, hook: str) -> None:
    lines = await _side(database_url, "broken", hook)
    # Each enqueue returned (no caller retries into a duplicate) and each instance ran as
    # its handlers said: the failed attempt once, then its retry; nothing was dead-lettered.
    outcomes = sorted((line["workflow"], line["attempts"]) for line in lines if "workflow" in line)
    assert outcomes == [("flaky", 1), ("flaky", 2), ("traced", 1)]
    # Logged once for its kind of call, not once per span.
    call = {"on_start": "start", "on_end": "end"}[hook]
    assert [line["call"] for line in lines if "log" in line] == [call]
    names = {line["name"] for line in lines if "name" in line}
    if hook == "on_end":  # the spans were made, and the exporter before it got them
        assert {"mutation Many", "laneway.enqueue", "laneway.enqueue_many"} <= names
        assert {"laneway.claim", "laneway.step flaky.attempt", "laneway.operation a"} <= names
    else:  # none started; the work went on untraced
        assert names == set()


async def test_a_request_with_a_callers_traceparent_continues_its_trace(
    database_url: str,
) -> None:
    spans = [line for line in await _side(database_url, "caller") if "name" in line]
    served = {span["name"]: span for span in spans if span["kind"] == "SERVER"}
    caller = served["mutation FromCaller"]
    assert caller["trace_id"] == CALLER_TRACE
    assert caller["parent_id"] == CALLER_SPAN
    (enqueue,) = [
        s for s in spans if s["name"] == "laneway.enqueue" and s["trace_id"] == CALLER_TRACE
    ]
    assert enqueue["parent_id"] == caller["span_id"]  # its instance's steps join the trace too
    for unparented in ("mutation FromGarbled", "mutation FromNobody"):  # a trace of its own
        assert served[unparented]["parent_id"] is None
        assert served[unparented]["trace_id"] != CALLER_TRACE


def _steps_of(lines: list[dict[str, Any]], instance_id: str) -> list[dict[str, Any]]:
    return [
        line
        for line in lines
        if line.get("name", "").startswith("laneway.step ")
        and line["attributes"]["laneway.instance_id"] == instance_id
    ]


async def test_a_failed_steps_and_operations_span_records_the_exception(
    database_url: str,
) -> None:
    lines = await _side(database_url, "failures")
    boom, _, exploding = [line["instance_id"] for line in lines if "failed" in line]
    # A handler's exception, as OpenTelemetry's record_exception keeps it: type, message and
    # the traceback down to the user's frame that raised it; the status as before.
    for step in _steps_of(lines, boom):
        assert step["status"] == "ERROR"
        (event,) = step["events"]
        assert event["name"] == "exception"
        assert event["attributes"]["exception.type"] == "KeyError"
        assert event["attributes"]["exception.message"] == "'missing'"
        assert "in _missing" in event["attributes"]["exception.stacktrace"]
    (operation,) = [line for line in lines if line.get("name") == "laneway.operation check"]
    assert operation["status"] == "ERROR"
    (event,) = operation["events"]
    assert event["attributes"]["exception.type"] == "RuntimeError"
    assert event["attributes"]["exception.message"] == "check exploded"
    assert "in _explode" in event["attributes"]["exception.stacktrace"]
    (step,) = _steps_of(lines, exploding)
    assert step["status"] == "ERROR"
    (event,) = step["events"]  # the stage's failure, its cause (the operation's) in its trace
    assert "check exploded" in event["attributes"]["exception.stacktrace"]


async def test_steps_spans_number_attempts_as_failures_do_and_link_to_the_first_failure(
    database_url: str,
) -> None:
    lines = await _side(database_url, "failures")
    failed = {line["instance_id"]: line["failed"] for line in lines if "failed" in line}
    boom, tripped, _ = failed
    claims = {line["span_id"] for line in lines if line.get("name") == "laneway.claim"}
    # Two attempts, retried by hand, two more: the spans say 3 and 4 after the retry, as
    # `failures` (and the events, the logs) do, and each after the first links to it.
    steps = _steps_of(lines, boom)
    assert [s["attributes"]["laneway.attempt"] for s in steps] == failed[boom] == [1, 2, 3, 4]
    first, *later = steps
    assert [link in claims for link in first["links"]] == [True]
    for step in later:
        assert step["links"][0] == first["span_id"]
        assert [link in claims for link in step["links"][1:]] == [True]
    # One failed attempt, one that paused, and the step after the resume: attempt 3 of the
    # instance, whose first failed attempt it links to too.
    steps = _steps_of(lines, tripped)
    assert [s["name"] for s in steps] == ["laneway.step tripped.trip"] * 2 + [
        "laneway.step tripped.after"
    ]
    assert [s["attributes"]["laneway.attempt"] for s in steps] == [1, 2, 3]
    assert failed[tripped] == [1]
    first, *later = steps
    for step in later:
        assert step["links"][0] == first["span_id"]
        assert [link in claims for link in step["links"][1:]] == [True]


class _BrokenStrError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


def test_a_failure_whose_exception_has_a_broken_str_still_marks_its_span_failed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # An outside audit: record_exception (which reads str()) ran first and raised, so the
    # status was never set (the failed attempt's span read as OK) and a tracing fault was
    # logged for what is the exception's own. A span of a provider of this test's only.
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from laneway.engine import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    described = "tests.test_tracing._BrokenStrError: <exception str() failed>"
    with tracer.start_as_current_span("marked"):
        tracing.mark_failed(described, _BrokenStrError())
    left = tracer.start_span("left")
    with pytest.raises(_BrokenStrError), tracing.current(left):
        raise _BrokenStrError
    left.end()
    marked, left_span = exporter.get_finished_spans()
    assert marked.status.status_code == trace.StatusCode.ERROR
    assert marked.status.description == described
    assert left_span.status.status_code == trace.StatusCode.ERROR
    assert left_span.status.description == "_BrokenStrError"
    assert "tracing call failed" not in caplog.text
