"""`laneway … --url BASE` as a user runs it: subprocesses against a real uvicorn server in this
test's event loop, with no database and no workflows of their own.

Through --url every instance subcommand uses the server's GraphQL API and its registry; error
codes map to exit codes (NOT_FOUND, CONFLICT: 1; BAD_USER_INPUT, UNAUTHENTICATED, FORBIDDEN: 2;
an unreachable server: 1), each a one-line message.
"""

import asyncio
import contextlib
import json
import signal
import sys
from typing import Any
from uuid import UUID

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from app.examples import countdown
from laneway.cli.client import CommandError, UnreachableError
from laneway.cli.remote import RemoteClient
from laneway.model import Status
from laneway.store import Store
from tests.api.conftest import TOKEN, LiveServer, live_server, make_settings
from tests.engine.helpers import make_engine, until_status
from tests.test_cli import ROOT, environment, laneway
from tests.test_cli_watch import _head, piped

NOWHERE = "postgresql://nobody@127.0.0.1:1/none"  # any use of a database would fail
UNKNOWN = "00000000-0000-7000-8000-000000000000"


def client_env(**extra: str) -> dict[str, str]:
    """A CLI environment with no usable database and no workflows: all must come from --url."""
    env = environment(NOWHERE, COLUMNS="120", **extra)
    env["LANEWAY_WORKFLOWS"] = ""
    return env


def url_of(server: LiveServer) -> str:
    return f"http://127.0.0.1:{server.port}"


async def remote(server: LiveServer, *args: str, **extra: str) -> tuple[int, str, str]:
    return await laneway(*args, "--url", url_of(server), env=client_env(**extra), timeout=60)


async def test_url_uses_the_servers_api_and_workflows(database_url: str) -> None:
    async with live_server(make_settings(database_url)) as server:
        code, out, err = await remote(server, "workflows", "--json")
        assert code == 0, err
        names = {w["name"] for w in json.loads(out)}
        assert {"countdown", "hello"} <= names  # the server's registry, not LANEWAY_WORKFLOWS
        code, out, err = await remote(
            server, "enqueue", "countdown", "--params", '{"n": 3, "delayMs": 20}'
        )
        assert code == 0, err
        created: dict[str, Any] = json.loads(out)
        assert created["created"] is True
        instance_id = created["instanceID"]
        code, out, err = await remote(server, "watch", "--instance", instance_id)
        assert code == 0, err
        assert "completed" in out.splitlines()[-2]  # the last event, above the final bar
        assert "3 of 3" in out
        code, out, err = await remote(server, "status", instance_id, "--json")
        assert code == 0, err
        shown = json.loads(out)
        assert (shown["status"], shown["result"]) == ("completed", {"count": 3})
        assert shown["waitingReason"] is None
        code, out, err = await remote(server, "queues")
        assert code == 0, err
        assert any(line.split()[:1] == ["countdown"] for line in out.splitlines()), out
        code, _, err = await remote(server, "enqueue", "nope")
        assert code == 2
        assert "unknown workflow 'nope'" in err


async def test_actions_over_url_and_their_exit_codes(database_url: str, store: Store) -> None:
    async with live_server(make_settings(database_url)) as server:
        code, out, _ = await remote(
            server, "enqueue", "countdown", "--params", '{"n": 100, "delayMs": 200}'
        )
        instance_id = json.loads(out)["instanceID"]
        code, out, err = await remote(server, "cancel", instance_id)
        assert code == 0, err
        assert json.loads(out) == {"instanceID": instance_id, "status": "cancelled"}
        code, out, _ = await remote(server, "watch", "--instance", instance_id, "--json")
        assert code == 1  # it ended cancelled
        assert json.loads(out.splitlines()[-1])["type"] == "cancelled"
        code, _, err = await remote(server, "retry", instance_id)
        assert code == 1  # CONFLICT
        assert "while it is cancelled" in err
        code, _, err = await remote(server, "resume", UNKNOWN)
        assert code == 1  # NOT_FOUND
        code, _, err = await remote(server, "status", UNKNOWN)
        assert code == 1
        assert "no instance" in err
        code, _, err = await remote(server, "enqueue", "countdown", "--params", '{"n": -1}')
        assert code == 2  # BAD_USER_INPUT
        code, out, err = await remote(
            server, "enqueue", "approval", "--params", '{"timeoutSeconds": 600}'
        )
        assert code == 0, err
        waiting = json.loads(out)["instanceID"]
        await until_status(store, UUID(waiting), Status.WAITING, timeout=30)
        code, out, err = await remote(
            server, "signal", waiting, "approve", "--payload", '{"by": "url"}'
        )
        assert code == 0, err
        assert json.loads(out)["accepted"] is True


async def test_tokens_are_sent_and_refusals_are_clear(database_url: str) -> None:
    async with live_server(make_settings(database_url, api_tokens=(TOKEN,))) as server:
        code, _, err = await remote(server, "status", UNKNOWN)
        assert code == 2
        assert f"the server at {url_of(server)} needs a token" in err
        assert "--token" in err
        code, _, err = await remote(server, "status", UNKNOWN, "--token", "wrong")
        assert code == 2
        assert "refused the token" in err
        code, _, err = await remote(server, "watch", "--token", "wrong")
        assert code == 2
        assert "refused the subscription" in err
        code, _, err = await remote(server, "status", UNKNOWN, LANEWAY_TOKEN=TOKEN)
        assert code == 1  # through: the server looked and found nothing
        assert "no instance" in err
        code, out, err = await remote(server, "queues", "--json", "--token", TOKEN)
        assert code == 0, err
        assert isinstance(json.loads(out), list)


async def test_a_server_that_cannot_be_reached_is_one_line_exit_1(database_url: str) -> None:
    env = client_env()
    code, _, err = await laneway("status", UNKNOWN, "--url", "http://127.0.0.1:1", env=env)
    assert code == 1
    assert err.startswith("laneway: cannot reach the server at http://127.0.0.1:1")
    assert len(err.strip().splitlines()) == 1
    code, _, err = await laneway("watch", "--url", "http://127.0.0.1:1", env=env)
    assert code == 1
    assert "cannot reach" in err
    for url in ("127.0.0.1:8000", "http://[::1"):  # the second one was httpx's traceback
        code, _, err = await laneway("queues", "--url", url, env=env)
        assert code == 2, err
        assert err == (
            "laneway: --url must be the server's base URL, such as http://127.0.0.1:8000,"
            f" not {url!r}\n"
        )
    async with live_server(make_settings(database_url)) as server:
        code, _, err = await laneway("queues", "--url", f"{url_of(server)}/nothing-here", env=env)
    assert code == 1
    assert "without a GraphQL response" in err


async def test_watch_over_url_follows_new_events_until_interrupted(database_url: str) -> None:
    async with live_server(make_settings(database_url)) as server:
        watcher = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "laneway", "watch", "--json", "--url", url_of(server),
            cwd=ROOT, env=client_env(),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert watcher.stdout is not None
        try:
            await server.wait_for_subscribers(1)
            code, out, err = await remote(server, "enqueue", "hello", "--params", '{"name": "L"}')
            assert code == 0, err
            async with asyncio.timeout(30):
                first = json.loads(await watcher.stdout.readline())
        finally:
            watcher.send_signal(signal.SIGINT)
            async with asyncio.timeout(30):
                await watcher.wait()
    assert (first["type"], first["instanceID"]) == ("enqueued", json.loads(out)["instanceID"])
    assert watcher.returncode == 0


async def test_a_server_that_does_not_answer_is_not_called_unreachable() -> None:
    # A read timeout: the request went out, and may have been done there.
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)  # takes the request, answers nothing until the client leaves
        await reader.read()
        writer.close()

    listener = await asyncio.start_server(silent, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}"
    async with listener, httpx.AsyncClient(timeout=0.2) as http:
        with pytest.raises(CommandError) as raised:
            await RemoteClient(http, url, None).execute("{ queues { name } }")
    assert str(raised.value) == f"the server at {url} did not answer within 0.2 s"
    assert not isinstance(raised.value, UnreachableError)
    with pytest.raises(UnreachableError, match=f"^cannot reach the server at {url}: "):
        async with httpx.AsyncClient(timeout=0.2) as http:
            await RemoteClient(http, url, None).execute("{ queues { name } }")


@pytest.mark.parametrize(("burst", "shows"), [(10, "60 of 60"), (3, "completed")])
async def test_watch_over_url_with_a_token_keeps_within_the_rate_limit(
    database_url: str, store: Store, burst: int, shows: str
) -> None:
    # A replay of 60 events used to ask for the progress 60 times: RATE_LIMITED, exit 1. Now
    # it asks at most once a second; and when even that is refused (a burst of 3 is spent on
    # the status, the websocket and the subscription), the bar shows the events' status.
    engine = make_engine(store, countdown, poll_interval_seconds=0.05)
    enqueued = await engine.enqueue("countdown", {"n": 60, "delayMs": 0})
    async with engine.running():
        await until_status(store, enqueued.instance_id, Status.COMPLETED, timeout=30)
    settings = make_settings(
        database_url,
        api_tokens=(TOKEN,),
        engine_enabled=False,
        rate_limit_per_second=0.1,
        rate_burst=burst,
    )
    async with live_server(settings) as server:
        code, out, err = await remote(
            server, "watch", "--instance", str(enqueued.instance_id), "--token", TOKEN
        )
    assert code == 0, err
    assert err == ""
    assert out.count("checkpoint") == 60
    assert out.splitlines()[-1].startswith(f"{shows} "), out
    assert "100%" in out


async def test_watch_over_url_ends_quietly_with_141_when_its_reader_goes_away(
    database_url: str,
) -> None:
    # It used to say "cannot reach the server: [Errno 32] Broken pipe" (exit 1).
    async with live_server(make_settings(database_url, engine_enabled=False)) as server:
        args = ("watch", "--json", "--url", url_of(server))
        async with piped(*args, env=client_env()) as (process, reader, transport):
            await server.wait_for_subscribers(1)
            code, _, err = await remote(server, "enqueue", "hello", "--params", '{"name": "a"}')
            assert code == 0, err
            assert b"enqueued" in await _head(reader, transport)
            code, _, err = await remote(server, "enqueue", "hello", "--params", '{"name": "b"}')
            assert code == 0, err
            assert process.stderr is not None
            async with asyncio.timeout(30):
                err_bytes = await process.stderr.read()
                await process.wait()
    assert process.returncode == 141, err_bytes.decode()
    assert err_bytes == b""


# Answers of a server that is not Laneway (or not of this version), by the path --url names.
ODD_ANSWERS: dict[str, object] = {
    "errors-of-strings": {"errors": ["boom"]},
    "errors-not-a-list": {"errors": "not a list"},
    "fields-missing": {"data": {"workflowInstance": {"instanceID": "x"}}},
    "null-objects": {"data": {"action": None, "bulk": None, "queues": None}},
    "null-in-a-list": {"data": {"queues": [None]}},
}


def odd_server() -> Starlette:
    """Canned answers over HTTP; over the websocket, an event that is not WorkflowEvent."""

    async def answer(request: Request) -> JSONResponse:
        return JSONResponse(ODD_ANSWERS[request.path_params["case"]])

    async def subscription(websocket: WebSocket) -> None:
        await websocket.accept(subprotocol="graphql-transport-ws")
        await websocket.receive_json()
        await websocket.send_json({"type": "connection_ack"})
        await websocket.receive_json()
        await websocket.send_json({"id": "1", "type": "next", "payload": {"data": {"x": 1}}})
        with contextlib.suppress(WebSocketDisconnect):
            await websocket.receive_json()  # until the client leaves

    return Starlette(
        routes=[
            Route("/{case}/graphql", answer, methods=["POST"]),
            WebSocketRoute("/graphql", subscription),
        ]
    )


@pytest.mark.parametrize(
    ("case", "args", "says"),
    [
        ("errors-of-strings", ("status", UNKNOWN), "laneway: boom"),
        ("errors-not-a-list", ("status", UNKNOWN), "laneway: not a list"),
        ("fields-missing", ("status", UNKNOWN), "has no workflowInstance.name where"),
        ("null-objects", ("cancel", UNKNOWN), "has no action where"),
        ("null-objects", ("cancel", "--filter", "name=x", "--yes"), "has no bulk where"),
        ("null-objects", ("queues",), "has no queues where"),
        ("null-in-a-list", ("queues",), "has no queues[0] where"),
        ("", ("watch", "--json"), "has no workflowEvents where"),
    ],
)
async def test_an_answer_that_is_not_laneways_is_one_line_exit_1(
    case: str, args: tuple[str, ...], says: str
) -> None:
    # They were AttributeError, KeyError or TypeError tracebacks.
    async with live_server(make_settings(NOWHERE), app=odd_server()) as server:
        url = f"{url_of(server)}/{case}".rstrip("/")
        code, out, err = await laneway(*args, "--url", url, env=client_env())
    assert code == 1, err
    assert out == ""
    assert err.startswith("laneway: "), err
    assert says in err, err
    assert len(err.splitlines()) == 1, err
