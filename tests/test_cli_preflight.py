"""`laneway preflight` (issue #21): the new code's modules against the database's instances in
flight; exit 1 when something would be stranded, so it can gate a deploy step."""

import io
import json
import uuid
from pathlib import Path

import pytest
from rich.console import Console

from laneway.cli.client import JSONObject
from laneway.cli.preflight import findings_table
from laneway.engine import Engine, WorkflowRegistry
from laneway.store import Store
from tests.test_cli import environment, laneway
from tests.versioned_workflows import deploy_demo


async def test_preflight_gates_a_deploy_on_what_it_would_strand(
    database_url: str, store: Store
) -> None:
    engine = Engine(store, WorkflowRegistry([deploy_demo("1")]))
    stranded = (await engine.enqueue("deploy_demo")).instance_id
    env = environment(database_url, LANEWAY_WORKFLOWS="tests.versioned_v1", COLUMNS="200")

    code, out, err = await laneway("preflight", "--workflows", "tests.versioned_v2", env=env)
    assert code == 1, err
    assert "VERSION_GONE" in out
    assert "version '1' is not in the new code (it has '2')" in out
    assert str(stranded) in out

    code, out, err = await laneway(
        "preflight", "--workflows", "tests.versioned_v2", "--json", env=env
    )
    assert code == 1, err
    (finding,) = json.loads(out)
    assert (finding["reason"], finding["count"], finding["sampleIDs"]) == (
        "VERSION_GONE",
        1,
        [str(stranded)],
    )

    # Keeping v1 beside v2 strands nothing; LANEWAY_WORKFLOWS is the default new code.
    both = environment(database_url, LANEWAY_WORKFLOWS="tests.versioned_v1,tests.versioned_v2")
    code, out, err = await laneway("preflight", env=both)
    assert code == 0, err
    assert "Safe to deploy" in out
    assert "deploy_demo@1" in out
    # Which files were checked: run from the old code's folder, it would check the old code
    # (the current folder comes first on the import path), and this line shows it.
    tests_folder = Path(__file__).parent
    for module in ("versioned_v1", "versioned_v2"):
        assert f"tests.{module} ({tests_folder / module}.py)" in " ".join(out.split())


async def test_preflight_refuses_code_it_cannot_import(database_url: str) -> None:
    env = environment(database_url)
    code, _, err = await laneway("preflight", "--workflows", "no_such_module_here", env=env)
    assert code == 2
    assert "no_such_module_here" in err


async def test_new_code_given_by_option_replaces_the_modules_running_now(
    database_url: str, store: Store
) -> None:
    # The code running now may be gone from where the deploy step runs (a renamed module):
    # --workflows replaces LANEWAY_WORKFLOWS, also for the database mode's own engine.
    engine = Engine(store, WorkflowRegistry([deploy_demo("1")]))
    stranded = (await engine.enqueue("deploy_demo")).instance_id
    env = environment(database_url, LANEWAY_WORKFLOWS="tests.renamed_away_before_this_deploy")
    code, out, err = await laneway(
        "preflight", "--workflows", "tests.versioned_v2", "--json", env=env
    )
    assert code == 1, err
    (finding,) = json.loads(out)
    assert (finding["reason"], finding["sampleIDs"]) == ("VERSION_GONE", [str(stranded)])


@pytest.mark.parametrize(
    ("width", "left_out"), [(50, "workflow, version, reason, detail"), (80, "version, detail")]
)
def test_preflight_keeps_the_count_when_columns_are_left_out(width: int, left_out: str) -> None:
    # An outside audit: at 80 columns the count, the number a deploy gate is about, was left
    # out second, after the detail.
    finding: JSONObject = {
        "name": "deploy_demo",
        "version": "1",
        "reason": "VERSION_GONE",
        "detail": "version '1' is not in the new code (it has '2')",
        "count": 1234,
        "sampleIDs": [str(uuid.uuid4()) for _ in range(3)],
    }
    buffer = io.StringIO()
    Console(file=buffer, width=width, highlight=False).print(findings_table([finding]))
    shown = buffer.getvalue()
    header, row = (line.split() for line in shown.splitlines()[2:5:2])
    assert "count" in header, shown
    assert "1234" in row, shown
    assert f"Left out to fit {width} columns: {left_out}" in " ".join(shown.split()), shown


@pytest.mark.parametrize("width", [40, 42, 50, 60, 80, 120])
def test_preflight_never_folds_a_sample_id_whatever_the_width(width: int) -> None:
    ids = [str(uuid.uuid4()) for _ in range(3)]
    finding: JSONObject = {
        "name": "deploy_demo",
        "version": "1",
        "reason": "VERSION_GONE",
        "detail": "version '1' is not in the new code (it has '2')",
        "count": 3,
        "sampleIDs": ids,
    }
    buffer = io.StringIO()
    Console(file=buffer, width=width, highlight=False).print(findings_table([finding]))
    shown = buffer.getvalue()
    lines = shown.splitlines()
    assert all(len(line.rstrip()) <= width for line in lines), shown
    assert all(any(instance in line for line in lines) for instance in ids), shown
    if width <= 80:
        assert f"Left out to fit {width} columns" in " ".join(shown.split()), shown
