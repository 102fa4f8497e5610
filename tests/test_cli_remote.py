"""`laneway … --url BASE` as a user runs it: subprocesses against a real uvicorn server in this
test's event loop, with no database and no workflows of their own.

Through --url every instance subcommand uses the server's GraphQL API and its registry; error
codes map to exit codes (NOT_FOUND, CONFLICT: 1; BAD_USER_INPUT, UNAUTHENTICATED, FORBIDDEN: 2;
an unreachable server: 1), each a one-line message.
"""

import argparse
import array
import asyncio
import contextlib
import fcntl
import json
import signal
import sys
import termios
from collections.abc import AsyncIterator, Callable
from typing import Any
from uuid import UUID

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from app.examples import countdown, hello
from laneway.cli import build_parser, bulk
from laneway.cli import remote as remote_module
from laneway.cli.client import CommandError, UnreachableError
from laneway.cli.remote import RemoteClient, base_url
from laneway.config import Settings
from laneway.model import Status
from laneway.store import Store
from tests.api.conftest import TOKEN, LiveServer, live_server, make_settings
from tests.engine.helpers import eventually, make_engine, until_status
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


@pytest.mark.parametrize(
    ("args", "extra", "says"),
    [
        # httpx's UnicodeEncodeError traceback, exit 1.
        (("status", UNKNOWN, "--token", "café"), {}, "--token: 4 is not ASCII"),
        # "lost the answer of the server at ...: Illegal header value", exit 1.
        (("queues",), {"LANEWAY_TOKEN": "tok\nen"}, "LANEWAY_TOKEN: 4 is a line break"),
        (("cancel", "--filter", "name=x", "--yes", "--token", "a b"), {}, "--token: 2 is a space"),
        # watch sent it in its websocket message, and said the server refused it.
        (("watch", "--token", "café"), {}, "--token: 4 is not ASCII"),
        (("watch",), {"LANEWAY_TOKEN": "t\x7f"}, "LANEWAY_TOKEN: 2 is a control character"),
    ],
    ids=["non-ascii", "line-break", "space", "watch-non-ascii", "watch-control"],
)
async def test_a_token_that_is_not_visible_ascii_is_refused_before_anything_is_sent(
    args: tuple[str, ...], extra: dict[str, str], says: str
) -> None:
    connections = 0

    async def counted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        writer.close()

    listener = await asyncio.start_server(counted, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}"
    async with listener:
        code, out, err = await laneway(*args, "--url", url, env=client_env(**extra))
    source, character = says.split(": ")
    assert (code, out) == (2, ""), err
    assert err == (
        f"laneway: {source} must hold only visible ASCII characters, as a bearer token does"
        " (letters, digits and punctuation, without spaces or line breaks): its character"
        f" {character}\n"
    )
    assert connections == 0


async def test_an_empty_token_is_refused_not_taken_for_laneway_token() -> None:
    # `--token "$TOKEN"` with TOKEN unset sent LANEWAY_TOKEN, a token the user did not name.
    code, out, err = await laneway(
        "queues", "--url", "http://127.0.0.1:1", "--token", "", env=client_env(LANEWAY_TOKEN=TOKEN)
    )
    assert (code, out) == (2, ""), err
    assert err == (
        "laneway: --token is empty: give the token, or leave --token out to use LANEWAY_TOKEN\n"
    )


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


@pytest.mark.parametrize(
    "args",
    [("status", UNKNOWN), ("cancel", "--filter", "name=x", "--yes"), ("watch",)],
    ids=["status", "bulk", "watch"],
)
async def test_an_empty_url_is_refused_not_taken_for_no_url(args: tuple[str, ...]) -> None:
    # `--url "$SERVER"` with SERVER unset used the database of DATABASE_URL (or started the
    # embedded PostgreSQL in ./.laneway): here NOWHERE, so "cannot use the database", exit 1.
    code, out, err = await laneway(*args, "--url", "", env=client_env(LANEWAY_TOKEN=TOKEN))
    assert (code, out) == (2, ""), err
    assert err == (
        "laneway: --url must be the server's base URL, such as http://127.0.0.1:8000, not ''\n"
    )


@pytest.mark.parametrize(
    ("url", "port"),
    [("http://127.0.0.1:99999", 99999), ("http://127.0.0.1:0/", 0), ("https://[::1]:70000", 70000)],
)
def test_a_url_whose_port_is_out_of_range_is_refused(url: str, port: int) -> None:
    # httpx.URL takes any number: "cannot reach the server ...: All connection attempts
    # failed", exit 1, as if a server there were down.
    with pytest.raises(CommandError) as raised:
        base_url(url)
    assert raised.value.exit_code == 2
    assert str(raised.value) == f"--url's port must be from 1 to 65535, not {port} (in {url!r})"


async def test_a_url_whose_port_is_out_of_range_is_one_line_exit_2() -> None:
    url = "http://127.0.0.1:99999"
    code, out, err = await laneway("status", UNKNOWN, "--url", url, env=client_env())
    assert (code, out) == (2, ""), err
    assert err == f"laneway: --url's port must be from 1 to 65535, not 99999 (in {url!r})\n"


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


async def test_watch_over_url_follows_an_instance_across_a_server_restart(
    database_url: str,
) -> None:
    """A deploy restarts the server (uvicorn closes the socket with 1012): the watch connects
    again and resumes after the last event it printed, instead of exiting 1 mid-instance."""
    async with live_server(make_settings(database_url, engine_enabled=False)) as first:
        port = first.port
        code, out, err = await remote(first, "enqueue", "hello", "--params", '{"name": "R"}')
        assert code == 0, err
        target = json.loads(out)["instanceID"]
        watcher = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "laneway", "watch", "--instance", target, "--json",
            "--url", url_of(first), cwd=ROOT, env=client_env(),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert watcher.stdout is not None
        async with asyncio.timeout(30):
            enqueued = json.loads(await watcher.stdout.readline())
    assert enqueued["type"] == "enqueued"
    # Back on the same port, with an engine this time: the instance runs and ends.
    async with live_server(make_settings(database_url), port=port):
        async with asyncio.timeout(60):
            rest, err_bytes = await watcher.communicate()
    events = [enqueued] + [json.loads(line) for line in rest.decode().splitlines()]
    assert watcher.returncode == 0, err_bytes.decode()
    assert [e["type"] for e in events] == ["enqueued", "started", "completed"]
    assert len({e["eventID"] for e in events}) == 3  # none twice after the reconnect
    assert "reconnecting" in err_bytes.decode()


async def test_a_follow_gives_up_when_the_server_stays_away(
    database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(remote_module, "RECONNECT_SECONDS", 0.3)
    async with contextlib.AsyncExitStack() as stack:
        http = await stack.enter_async_context(httpx.AsyncClient())
        async with live_server(make_settings(database_url, engine_enabled=False)) as server:
            url = url_of(server)
            events = await stack.enter_async_context(
                RemoteClient(http, url, None).follow(None, None)
            )
            await server.wait_for_subscribers(1)
        with pytest.raises(CommandError) as raised:  # the server is gone for good
            async with asyncio.timeout(30):
                await anext(events)
    assert str(raised.value) == f"lost the connection to the server at {url} (close code 1012)"
    assert capsys.readouterr().err.count("reconnecting") == 1


async def _silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A server's connection that takes the request and answers nothing until the client
    leaves."""
    await reader.read(1)
    await reader.read()
    writer.close()


async def test_a_server_that_does_not_answer_is_not_called_unreachable() -> None:
    # A read timeout: the request went out, and may have been done there.
    listener = await asyncio.start_server(_silent, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}"
    async with listener, httpx.AsyncClient(timeout=0.2) as http:
        with pytest.raises(CommandError) as raised:
            await RemoteClient(http, url, None).execute("{ queues { name } }")
    assert str(raised.value) == f"the server at {url} did not answer within 0.2 s"
    assert not isinstance(raised.value, UnreachableError)
    with pytest.raises(UnreachableError, match=f"^cannot reach the server at {url}: "):
        async with httpx.AsyncClient(timeout=0.2) as http:
            await RemoteClient(http, url, None).execute("{ queues { name } }")


def _bulk_cancel(url: str) -> argparse.Namespace:
    return build_parser().parse_args(["cancel", "--filter", "name=x", "--yes", "--url", url])


async def test_a_bulk_actions_count_waits_as_long_as_any_other_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Its dry run (which changes nothing) waited for the answer as long as the action may, so
    # against a server that takes requests and never answers, the command never ended.
    monkeypatch.setattr("laneway.cli.remote.TIMEOUT_SECONDS", 0.2)
    left = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _silent(reader, writer)
        left.set()

    listener = await asyncio.start_server(silent, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}"
    async with listener, asyncio.timeout(20):  # the deadline of a test that fails by hanging
        with pytest.raises(CommandError) as raised:
            await bulk.run(_bulk_cancel(url), Settings.from_env({}), "cancel")
        await left.wait()  # the connection closed, not left to the closed loop
    assert str(raised.value) == f"the server at {url} did not answer within 0.2 s"
    assert raised.value.exit_code == 1


async def test_a_bulk_action_waits_for_its_answer_past_the_read_timeout(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The action itself is one request however many instances it changes: it waits as long
    # as the server works on it (docs/cli.md), which here is several read timeouts.
    monkeypatch.setattr("laneway.cli.remote.TIMEOUT_SECONDS", 0.2)
    asked: list[bool] = []

    async def bulk_answer(request: Request) -> JSONResponse:
        dry_run = (await request.json())["variables"].get("dryRun") is True
        asked.append(dry_run)
        if not dry_run:
            await asyncio.sleep(1.0)  # the server at work: five of the client's read timeouts
        counts = {"matched": 1, "changed": 0 if dry_run else 1, "sampleIDs": [UNKNOWN]}
        return JSONResponse({"data": {"bulk": counts}})

    app = Starlette(routes=[Route("/graphql", bulk_answer, methods=["POST"])])
    async with live_server(make_settings(NOWHERE), app=app) as server:
        code = await bulk.run(_bulk_cancel(url_of(server)), Settings.from_env({}), "cancel")
    assert code == 0
    assert asked == [True, False]
    assert json.loads(capsys.readouterr().out) == {
        "matched": 1,
        "changed": 1,
        "sampleIDs": [UNKNOWN],
    }


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
    "null-data": {"data": None},
    "no-data": {},
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
        # "laneway: the server at ... answered HTTP 200", which did not say what was wrong.
        ("null-data", ("status", UNKNOWN), "(HTTP 200) has no data, and no errors to say why"),
        ("no-data", ("queues",), "(HTTP 200) has no data, and no errors to say why (is it a"),
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


class PongCounter:
    """A TCP relay in front of the server that counts the websocket pongs its clients send:
    their answers to the server's keepalive pings (RFC 6455 frames, client to server)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.pongs = 0
        self._writers: list[asyncio.StreamWriter] = []

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        """Relay until exit; yields the base URL that reaches the server through it."""
        relay = await asyncio.start_server(self._link, "127.0.0.1", 0)
        try:
            yield f"http://127.0.0.1:{relay.sockets[0].getsockname()[1]}"
        finally:
            relay.close()
            for writer in self._writers:
                writer.close()

    async def _link(self, client: asyncio.StreamReader, to_client: asyncio.StreamWriter) -> None:
        server, to_server = await asyncio.open_connection("127.0.0.1", self.port)
        self._writers += [to_client, to_server]
        with contextlib.suppress(ConnectionError):
            await asyncio.gather(self._up(client, to_server), self._down(server, to_client))

    async def _down(self, server: asyncio.StreamReader, to_client: asyncio.StreamWriter) -> None:
        while data := await server.read(65536):
            to_client.write(data)
            await to_client.drain()
        to_client.close()

    async def _up(self, client: asyncio.StreamReader, to_server: asyncio.StreamWriter) -> None:
        seen, upgraded = b"", False
        while data := await client.read(65536):
            to_server.write(data)
            await to_server.drain()
            seen += data
            if not upgraded:  # the HTTP upgrade request comes first
                _, separator, rest = seen.partition(b"\r\n\r\n")
                upgraded, seen = bool(separator), rest if separator else seen
            if upgraded:
                seen = self._count(seen)
        to_server.close()

    def _count(self, frames: bytes) -> bytes:
        """Count the pongs among the whole frames of `frames`; return what is left of it."""
        while len(frames) >= 2:
            opcode, length, at = frames[0] & 0x0F, frames[1] & 0x7F, 2
            if length >= 126:
                at += 2 if length == 126 else 8
                length = int.from_bytes(frames[2:at])
            at += 4 if frames[1] & 0x80 else 0  # a client's frames are masked
            if len(frames) < at + length:
                break
            self.pongs += opcode == 0xA
            frames = frames[at + length :]
        return frames


async def test_watch_over_url_outlives_a_reader_that_pauses_past_the_keepalive(
    database_url: str, store: Store
) -> None:
    # `laneway watch --url ... | less`, then a reader that stops reading for a while: the
    # print blocked on the full pipe, the event loop with it, so no keepalive ping was
    # answered and the server dropped the connection after its ping interval and pong
    # timeout (20 s + 20 s), and the watch died. Here those are 0.25 s and 1 s; the reader
    # pauses until the watch has answered six pings since its output began (1.5 s and more).
    engine = make_engine(store, hello)
    # 127.0.0.1 at any port: the relay's, which the watch's Host names.
    settings = make_settings(database_url, engine_enabled=False, allowed_hosts=("127.0.0.1",))
    async with live_server(settings, ws_ping=(0.25, 1.0)) as server:
        relay = PongCounter(server.port)
        async with (
            relay.running() as url,
            piped("watch", "--json", "--url", url, env=client_env(), pipe_bytes=4096) as running,
        ):
            process, reader, transport = running
            transport.pause_reading()  # the reader pauses: the pipe fills
            await server.wait_for_subscribers(1)
            names = [f"n{i}" for i in range(60)]  # 15 kB of JSON lines
            enqueued = [(await engine.enqueue("hello", {"name": n})).instance_id for n in names]
            pipe = transport.get_extra_info("pipe").fileno()
            # The output (15 kB) is more than the pipe holds (4 kB): once it starts, the
            # watch's writes block until the reader comes back. (How full the pipe gets then
            # depends on how the writes fall into its one page.)
            await _until(lambda: _unread(pipe) > 0, "nothing was written")
            pongs = relay.pongs
            await _until(
                lambda: relay.pongs >= pongs + 6,
                "the watch answered no keepalive ping while its reader paused",
            )
            transport.resume_reading()
            async with asyncio.timeout(30):
                lines = [json.loads(await reader.readline()) for _ in enqueued]
                assert [line["instanceID"] for line in lines] == [str(i) for i in enqueued]
                # Still subscribed: a new event comes through.
                last = await engine.enqueue("hello", {"name": "after"})
                assert json.loads(await reader.readline())["instanceID"] == str(last.instance_id)
            assert process.returncode is None, "the watch ended"
            process.send_signal(signal.SIGINT)
            assert process.stderr is not None
            async with asyncio.timeout(30):
                err = await process.stderr.read()
                code = await process.wait()
    assert code == 0, err.decode()
    assert err == b""


def _unread(fd: int) -> int:
    """Bytes waiting in the pipe `fd` reads."""
    count = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, count)
    return count[0]


async def _until(holds: Callable[[], bool], failure: str, seconds: float = 20.0) -> None:
    """Poll `holds` until it is true, failing with `failure` at the deadline."""

    async def probe() -> bool:
        return holds()

    try:
        await eventually(probe, bool, timeout=seconds)
    except TimeoutError:
        raise AssertionError(failure) from None
