"""`laneway serve` as a real process: the URL it logs, and how its stop signals end it.

A clean shutdown on SIGINT or SIGTERM exits 0, as `worker` does (uvicorn's own handlers
re-raised the signal once it had shut down, so the process died of it: exit 143). A badly
wired template refuses `serve` as it refuses `worker`: exit 2 and one line, no traceback.
"""

import asyncio
import json
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
import websockets
from websockets.typing import Subprotocol

from laneway.store import Store
from tests.engine.helpers import eventually
from tests.test_cli import ROOT, environment, laneway

PROTOCOL = "graphql-transport-ws"


def is_ok(response: httpx.Response) -> bool:
    return response.status_code == 200


@asynccontextmanager
async def serving(
    database_url: str, *args: str, seen: list[dict[str, object]] | None = None, **env: str
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """`laneway serve ARGS --port 0` once /healthz answers, with the URL it logged; killed if
    the test leaves it running. `seen` gets the records logged before "listening"; `env` adds
    to the environment."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "laneway", "serve", "--port", "0", *args,
        cwd=ROOT, env=environment(database_url, LANEWAY_ENGINE="0", **env),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stderr is not None
    try:
        async with asyncio.timeout(60):
            while True:
                line = await process.stderr.readline()
                assert line, "serve ended before it listened"
                record = json.loads(line)
                if seen is not None:
                    seen.append(record)
                if record["message"] == "listening":
                    url = str(record["url"])
                    break
            async with httpx.AsyncClient(timeout=30) as client:
                await eventually(lambda: client.get(f"{url}/healthz"), is_ok, timeout=60)
        yield process, url
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_serve_exits_0_after_a_clean_shutdown_on_a_stop_signal(
    database_url: str, signum: signal.Signals
) -> None:
    async with serving(database_url) as (process, _):
        process.send_signal(signum)
        async with asyncio.timeout(30):
            _, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    assert b"Application shutdown complete" in err
    assert b"Traceback" not in err


def ipv6_loopback() -> bool:
    try:
        socket.create_server(("::1", 0), family=socket.AF_INET6).close()
    except OSError:
        return False
    return True


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback on this machine")
async def test_serve_on_an_ipv6_address_logs_a_url_that_works(database_url: str) -> None:
    # It logged http://::1:PORT, which is no URL.
    async with serving(database_url, "--host", "::1") as (process, url):
        assert re.fullmatch(r"http://\[::1\]:\d+", url), url
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            await process.communicate()
    assert process.returncode == 0


async def test_a_badly_wired_template_refuses_serve_as_it_refuses_worker(
    database_url: str,
) -> None:
    env = environment(database_url, LANEWAY_WORKFLOWS="tests.miswired_workflows")
    code, _, said = await laneway("worker", env=env)
    assert code == 2, said
    [refusal] = said.splitlines()
    assert refusal.startswith("laneway: 2 template problem(s):"), refusal
    assert "no handler for operation type 'unhandled'" in refusal
    assert "next_workflow 'nowhere' is not registered" in refusal
    # The modules LANEWAY_WORKFLOWS names are all the app's: refused before it listens.
    code, _, said = await laneway("serve", "--port", "0", env=env)
    assert (code, said.splitlines()) == (2, [refusal])
    # An --app factory's own workflows are checked as its app starts, inside uvicorn's
    # lifespan: the same line and code, and uvicorn logs no traceback.
    code, _, said = await laneway("serve", "--port", "0", "--app", "app.main:build", env=env)
    assert code == 2, said
    assert said.splitlines()[-1] == refusal
    assert "Traceback" not in said


async def test_worker_and_serve_refuse_an_owner_id_a_live_process_holds(
    database_url: str, store: Store
) -> None:
    # Found by an outside audit: a second worker with a live one's LANEWAY_OWNER_ID started,
    # and the two shared one workers row.
    await store.heartbeat_worker(
        owner_id="pod-0", role="worker", host="other-host", pid=4242, workflows=["hello"],
        versions=["hello@1"], running=0, concurrency=10, heartbeat_seconds=60.0,
    )  # fmt: skip
    env = environment(database_url, LANEWAY_OWNER_ID="pod-0")
    for command in (["worker"], ["serve", "--port", "0"]):
        code, _, said = await laneway(*command, env=env)
        assert code == 2, said
        refusal = said.splitlines()[-1]
        assert "started" not in said  # refused before anything says it started
        assert refusal.startswith(
            "laneway: refusing to start: owner id 'pod-0' is held by a live process"
            " (host other-host, pid 4242, last seen "
        ), refusal
        assert refusal.endswith(
            "s ago); give each process its own LANEWAY_OWNER_ID, or leave it unset"
        ), refusal
        assert "Traceback" not in said
    [row] = await store.live_workers()  # the holder's row, left as it was
    assert (row.owner_id, row.host, row.pid) == ("pod-0", "other-host", 4242)


async def test_serve_keeps_a_websockets_query_string_out_of_its_log(database_url: str) -> None:
    """uvicorn logs each websocket handshake with its path; a client may put its token in the
    query string, which a log must not keep."""
    async with serving(database_url) as (process, url):
        address = url.replace("http://", "ws://") + "/graphql?token=SECRET-IN-QUERY"
        async with websockets.connect(address, subprotocols=[Subprotocol(PROTOCOL)]) as socket:
            await socket.send(json.dumps({"type": "connection_init"}))
            assert json.loads(await socket.recv())["type"] == "connection_ack"
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            _, err = await process.communicate()
    assert b"SECRET-IN-QUERY" not in err
    assert b'WebSocket /graphql?\\u2026\\" [accepted]' in err  # the line stays, without it


async def test_serve_on_loopback_with_a_short_token_starts_and_warns(database_url: str) -> None:
    """A public address refuses a token shorter than 16 characters (tests/test_cli.py);
    loopback serves with it, and says so once, naming the token's place, never its text."""
    seen: list[dict[str, object]] = []
    tokens = "long-enough-token-1,Q7"
    async with serving(
        database_url, "--host", "127.0.0.1", seen=seen, LANEWAY_API_TOKENS=tokens
    ) as (process, url):
        async with httpx.AsyncClient(timeout=30) as client:
            answer = await client.post(
                f"{url}/graphql",
                json={"query": "{ workflows { name } }"},
                headers={"authorization": "Bearer Q7"},
            )
        assert answer.status_code == 200
        assert "errors" not in answer.json()
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            await process.communicate()
    warnings = [r for r in seen if r["message"] == "short api tokens"]
    assert len(warnings) == 1
    assert warnings[0]["tokens"] == [2]
    assert warnings[0]["min_length"] == 16
    assert "Q7" not in json.dumps(seen)
