"""`laneway instances` on the database and through a server: a keyset page of instances,
newest first, chosen by --filter, with the cursor of the next page.

Exit codes: 0 ok; 2 a --filter word a page does not take, a bad --first or cursor.
"""

import io
import json
import time
import uuid
from typing import Any

import pytest
from rich.console import Console

from app.examples import countdown, hello
from laneway.cli.client import JSONObject
from laneway.cli.instances import instances_table
from laneway.store import Store
from tests.cli_ways import both_ways, ways
from tests.engine.helpers import make_engine


@both_ways
async def test_instances_pages_through_what_a_filter_selects(
    way: str, database_url: str, store: Store
) -> None:
    engine = make_engine(store, hello, countdown)
    greeted = [(await engine.enqueue("hello", {"name": f"p{i}"})).instance_id for i in range(5)]
    counted = [
        (await engine.enqueue("countdown", {"n": 1, "delayMs": 0})).instance_id for _ in range(2)
    ]
    await engine.cancel(greeted[1])
    newest_first = [str(i) for i in reversed(greeted)]
    async with ways(way, database_url) as laneway:
        seen: list[str] = []
        after: list[str] = []
        while True:
            code, out, err = await laneway(
                "instances", "--filter", "name=hello", "--first", "2", *after, "--json"
            )
            assert code == 0, err
            page = json.loads(out)
            seen += [edge["node"]["instanceID"] for edge in page["edges"]]
            assert {edge["node"]["name"] for edge in page["edges"]} == {"hello"}
            if not page["pageInfo"]["hasNextPage"]:
                break
            after = ["--after", page["pageInfo"]["endCursor"]]
        assert seen == newest_first
        code, out, err = await laneway(
            "instances", "--filter", "status=cancelled", "--filter", "status=failed", "--json"
        )
        assert code == 0, err
        assert [e["node"]["instanceID"] for e in json.loads(out)["edges"]] == [str(greeted[1])]

        code, out, err = await laneway("instances", "--filter", "queue=countdown")
        assert code == 0, err
        rows = [line.split() for line in out.splitlines()]
        assert rows[2][:4] == ["instance", "workflow", "status", "queue"], out
        assert [row[0] for row in rows[4:] if row] == [str(i) for i in reversed(counted)], out
        assert "Next page" not in out
        code, out, err = await laneway("instances", "--first", "1")
        assert code == 0, err
        assert newest_first[0] not in out  # the countdowns came later
        next_page = out.splitlines()[-1]
        assert next_page.startswith("Next page: the same with --after "), out
        code, out, err = await laneway("instances", "--after", next_page.split()[-1], "--json")
        assert code == 0, err
        assert len(json.loads(out)["edges"]) == 6  # all but the newest


@both_ways
async def test_instances_refuses_what_a_page_cannot_select(way: str, database_url: str) -> None:
    async with ways(way, database_url) as laneway:
        code, out, err = await laneway("instances", "--filter", "name=nothing-like-it")
        assert (code, out) == (0, "No instances match.\n"), err
        code, _, err = await laneway("instances", "--filter", "created-after=2026-01-01")
        assert code == 2
        assert err == (
            "laneway: --filter created-after= is for cancel, retry and resume; a page of"
            " instances is chosen by name, queue, status, key, version and parent\n"
        )
        # The API's refusals, said with the options typed (they named GraphQL's arguments).
        for args, says in (
            (("--first", "501"), "laneway: --first must be at least 1 and at most 500\n"),
            (
                ("--after", "not-a-cursor"),
                "laneway: --after is not a cursor from `laneway instances` (the --after it"
                " names for the next page)\n",
            ),
            (("--filter", "status=done"), "laneway: --filter status= must be one of pending,"),
            # An empty value matches nothing: `--filter key=$KEY` with KEY unset (an audit).
            *(
                (("--filter", f"{key}="), f"laneway: --filter {key}= needs a value\n")
                for key in ("name", "queue", "status", "key", "version", "parent")
            ),
            (
                ("--filter", "colour=red"),
                "laneway: --filter takes KEY=VALUE with KEY one of name, queue, status, key,"
                " version, parent, not 'colour=red'\n",  # not the creation times it refuses
            ),
        ):
            code, _, err = await laneway("instances", *args)
            assert code == 2, err
            assert says in err, err
            assert "workflowInstancesConnection" not in err


@both_ways
async def test_instances_and_a_bulk_cancel_select_the_children_of_a_parent(
    way: str, database_url: str, store: Store
) -> None:
    engine = make_engine(store, hello)
    parent = (await engine.enqueue("hello", {"name": "parent"})).instance_id
    children = [
        str((await engine.enqueue("hello", {"name": f"c{i}"}, parent_id=parent)).instance_id)
        for i in range(3)
    ]
    stranger = (await engine.enqueue("hello", {"name": "stranger"})).instance_id
    async with ways(way, database_url) as laneway:
        code, out, err = await laneway("instances", "--filter", f"parent={parent}", "--json")
        assert code == 0, err
        nodes = [edge["node"] for edge in json.loads(out)["edges"]]
        assert [(n["instanceID"], n["parentID"]) for n in nodes] == [
            (child, str(parent)) for child in reversed(children)
        ]
        code, out, err = await laneway("cancel", "--filter", f"parent={parent}", "--dry-run")
        assert code == 0, err
        assert json.loads(out) == {
            "matched": 3,
            "changed": 0,
            "sampleIDs": list(reversed(children)),
        }
        code, out, err = await laneway("cancel", "--filter", f"parent={parent}", "--yes")
        assert code == 0, err
        assert json.loads(out)["changed"] == 3
        for child in children:
            record = await engine.get(uuid.UUID(child))
            assert record is not None
            assert record.status == "cancelled"
        for other in (parent, stranger):  # the parent and the others stay as they were
            record = await engine.get(other)
            assert record is not None
            assert record.status == "pending"
        # A parent that is not an instance id: exit 2, said as a malformed ID operand is.
        for args in (("instances",), ("cancel", "--yes")):
            code, _, err = await laneway(*args, "--filter", "parent=nope")
            assert code == 2, err
            assert err == "laneway: --filter parent= is not an instance id: 'nope'\n"
        code, _, err = await laneway("status", "nope")
        assert (code, err) == (2, "laneway: not an instance id: 'nope'\n")


def _rendered(renderable: Any, width: int) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=width, highlight=False).print(renderable)
    return buffer.getvalue()


@pytest.mark.parametrize("width", [40, 42, 50, 60, 80, 120])
def test_an_instance_id_is_never_folded_whatever_the_width(width: int) -> None:
    ids = [str(uuid.uuid4()) for _ in range(2)]
    nodes: list[JSONObject] = [
        {
            "instanceID": instance,
            "name": "a_workflow_with_a_long_name",
            "status": "running",
            "queue": "default",
            "attempts": 1,
            "createdAt": time.time() * 1000,  # epoch ms, as the API gives it
            "message": "halfway through the documents",
            "lastError": None,
        }
        for instance in ids
    ]
    shown = _rendered(instances_table(nodes), width)
    lines = shown.splitlines()
    assert all(len(line.rstrip()) <= width for line in lines), shown
    assert all(any(instance in line for line in lines) for instance in ids), shown
    if width < 80:
        assert f"Left out to fit {width} columns" in " ".join(shown.split()), shown
