"""The README's `telemetry.py` does what its Traces section says: named in LANEWAY_WORKFLOWS,
it gives `laneway worker` and `laneway enqueue` a tracer provider, and the worker's steps
join the trace of the enqueue another process made.

Run as tests/test_readme.py runs the README: its files in a fresh folder outside the checkout,
the commands from the repository's .venv, a fresh database (that module checks the block's
typing and that importing it starts nothing).
"""

import json
from pathlib import Path
from typing import Any

import pytest

from tests.engine.helpers import eventually
from tests.test_readme import background, files, run, user_environment

ENQUEUE = ["laneway", "enqueue", "ingest", "--params", '{"url": "https://example.com"}']


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    for name, text in files().items():
        (folder / name).write_text(text)
    return folder


def spans_in(text: str) -> list[dict[str, Any]]:
    """The spans ConsoleSpanExporter printed in `text` (JSON objects among the log lines)."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (at := text.find("{", at)) >= 0:
        try:
            value, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            at += 1
            continue
        if isinstance(value, dict) and {"name", "context", "parent_id"} <= value.keys():
            found.append(value)
    return found


async def test_a_module_named_in_laneway_workflows_traces_the_worker_and_the_cli(
    project: Path, database_url: str, tmp_path: Path
) -> None:
    assert "telemetry.py" in files()
    env = user_environment(
        database_url, LANEWAY_WORKFLOWS="telemetry,workflows", LANEWAY_POLL_SECONDS="0.2"
    )
    log = tmp_path / "worker.log"
    async with background(["laneway", "worker"], cwd=project, env=env, log=log):
        code, out, enqueued = await run(ENQUEUE, cwd=project, env=env)
        assert code == 0, enqueued
        instance_id = json.loads(out)["instanceID"]  # stdout is the command's alone

        async def status() -> str:
            code, out, err = await run(
                ["laneway", "status", instance_id, "--json"], cwd=project, env=env
            )
            assert code == 0, err
            shown: str = json.loads(out)["status"]
            return shown

        await eventually(status, lambda shown: shown == "completed", 60)
    # The enqueue's span, printed by the enqueuing command as it exited; the steps' spans,
    # printed by the worker as SIGTERM stopped it, are its children.
    (enqueue,) = [s for s in spans_in(enqueued) if s["name"] == "laneway.enqueue"]
    assert enqueue["attributes"]["laneway.instance_id"] == instance_id
    spans = spans_in(log.read_text())
    steps = [s for s in spans if s["name"].startswith("laneway.step ingest.")]
    assert [s["name"] for s in steps] == ["laneway.step ingest.fetch", "laneway.step ingest.count"]
    for step in steps:
        assert step["context"]["trace_id"] == enqueue["context"]["trace_id"]
        assert step["parent_id"] == enqueue["context"]["span_id"]
    claims = {s["context"]["span_id"] for s in spans if s["name"] == "laneway.claim"}
    assert steps[0]["links"][0]["context"]["span_id"] in claims
