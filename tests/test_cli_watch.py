"""`laneway watch --instance` and `laneway retry` as a user runs them, in database mode: a
subprocess against the per-test database, with an engine running the examples in this process.

watch --instance replays from the start, shows the progress and exits with the instance's
terminal status: 0 completed, 1 failed or cancelled.
"""

import asyncio
import fcntl
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import pytest

from app.examples import countdown, flaky, hello
from laneway.model import Status
from laneway.store import Store
from tests.engine.helpers import eventually, make_engine, until_status
from tests.test_cli import ROOT, environment, laneway, started_laneway


async def test_watch_an_instance_replays_shows_progress_and_exits_0_when_completed(
    database_url: str, store: Store
) -> None:
    env = environment(database_url, COLUMNS="120")
    engine = make_engine(store, countdown, poll_interval_seconds=0.05)
    enqueued = await engine.enqueue("countdown", {"n": 3, "delayMs": 0})
    instance_id = str(enqueued.instance_id)
    async with engine.running():
        await until_status(store, enqueued.instance_id, Status.COMPLETED, timeout=30)
    # Already over: a replay from the start still shows every event, then exits.
    code, out, err = await laneway("watch", "--instance", instance_id, env=env, timeout=30)
    assert code == 0, err
    lines = out.splitlines()
    types = [m.group(1) for line in lines if (m := re.match(r"\d\d:\d\d:\d\d\.\d{3}  (\w+)", line))]
    assert types[0] == "enqueued"
    assert types[-1] == "completed"
    assert types.count("checkpoint") == 3
    assert "3 of 3" in out  # the instance's message, beside its bar
    assert "100%" in out
    assert "1700000000" not in out  # no epoch numbers
    code, out, err = await laneway("watch", "--instance", instance_id, "--json", env=env)
    assert code == 0, err
    assert out.splitlines()[-1].startswith('{"eventID"')
    assert '"type": "completed"' in out.splitlines()[-1]


async def test_watch_exits_1_when_the_instance_fails_and_retry_runs_it_again(
    database_url: str, store: Store
) -> None:
    env = environment(database_url)
    engine = make_engine(store, flaky, poll_interval_seconds=0.05)
    enqueued = await engine.enqueue("flaky", {"failTimes": 100})
    instance_id = str(enqueued.instance_id)
    async with engine.running():
        # Following while it runs: the watcher ends by itself when the instance does.
        code, out, err = await laneway("watch", "--instance", instance_id, env=env, timeout=60)
        assert code == 1, err
        assert "failed" in out.splitlines()[-1]
        assert "flaky failure" in out  # the attempts' errors are shown
        code, out, err = await laneway("retry", instance_id, env=env)
        assert code == 0, err
        assert out.startswith(f'{{"instanceID": "{instance_id}", "status": "pending"')
        await until_status(store, enqueued.instance_id, Status.FAILED, timeout=30)
    async with store.connection() as conn:
        started = await conn.fetchval(
            "SELECT count(*) FROM laneway.events WHERE instance_id = $1 AND type = 'started'",
            enqueued.instance_id,
        )
    assert started > 3  # the retry ran a fresh budget of attempts after the first three


async def test_watch_an_unknown_instance_exits_1_at_once(database_url: str) -> None:
    code, _, err = await laneway(
        "watch", "--instance", "00000000-0000-7000-8000-000000000000",
        env=environment(database_url), timeout=30,
    )  # fmt: skip
    assert code == 1
    assert "no instance" in err


@asynccontextmanager
async def piped(
    *args: str, env: dict[str, str], pipe_bytes: int | None = None
) -> AsyncIterator[tuple[asyncio.subprocess.Process, asyncio.StreamReader, asyncio.ReadTransport]]:
    """`laneway ARGS` writing into a pipe that the test reads (it may pause the transport, as
    a pager does), and closes when it has read enough (as `| head` does); killed if the test
    leaves it running. `pipe_bytes`: the pipe's capacity (Linux: 4096 and up)."""
    read_end, write_end = os.pipe()
    if pipe_bytes is not None:
        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, pipe_bytes)
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "laneway", *args, cwd=ROOT, env=env,
            stdout=write_end, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
    finally:
        os.close(write_end)
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_end, "rb")
    )
    try:
        yield process, reader, transport
    finally:
        transport.close()
        if process.returncode is None:
            process.kill()
            await process.wait()


async def _head(reader: asyncio.StreamReader, transport: asyncio.BaseTransport) -> bytes:
    """The first line, then the reader gone."""
    async with asyncio.timeout(30):
        line = await reader.readline()
    transport.close()
    return line


@pytest.mark.parametrize("as_json", [True, False])
async def test_watch_ends_quietly_with_141_when_its_reader_goes_away(
    database_url: str, store: Store, as_json: bool
) -> None:
    # `laneway watch … | head -1` used to exit 1: "cannot use the database: [Errno 32] Broken
    # pipe". It now ends as a shell reports a command that SIGPIPE ended, and says nothing.
    engine = make_engine(store, hello)
    first = await engine.enqueue("hello", {"name": "a"})
    env = environment(database_url)
    args = ["--instance", str(first.instance_id)] if not as_json else ["--after", "0"]
    async with piped("watch", *args, *(["--json"] if as_json else []), env=env) as running:
        process, reader, transport = running
        assert b"enqueued" in await _head(reader, transport)
        # Something more to print, now that nobody reads it.
        await engine.cancel(first.instance_id)
        assert process.stderr is not None
        async with asyncio.timeout(30):
            err = await process.stderr.read()
            await process.wait()
    assert process.returncode == 141, err.decode()
    assert err == b""


async def _listener_pids(admin: asyncpg.Connection) -> set[int]:
    rows = await admin.fetch(
        "SELECT pid FROM pg_stat_activity "
        "WHERE application_name LIKE 'laneway-listener-%' AND datname = current_database()"
    )
    return {row["pid"] for row in rows}


async def _until_listener_other_than(admin: asyncpg.Connection, old: set[int]) -> set[int]:
    """The watcher's listener connection, once it is none of `old`'s (polled, under a deadline)."""
    async with asyncio.timeout(30):
        while True:
            pids = await _listener_pids(admin)
            if pids and not pids & old:
                return pids
            await asyncio.sleep(0.05)


async def test_watch_prints_no_log_line_when_its_listener_connection_is_lost(
    database_url: str, admin: asyncpg.Connection
) -> None:
    # The events library warns `listener connection lost` (and reconnects): a record for an
    # operator of serve or worker, which a one-shot command printed as a JSON line on stderr.
    env = environment(database_url)
    code, out, err = await laneway("enqueue", "hello", "--params", '{"name": "w"}', env=env)
    assert code == 0, err
    instance_id = json.loads(out)["instanceID"]
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "laneway", "watch", "--instance", instance_id, "--json",
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        first = await _until_listener_other_than(admin, set())
        await admin.execute("SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid", first)
        await _until_listener_other_than(admin, first)  # lost, said so, and back
        code, _, err = await laneway("cancel", instance_id, env=env)
        assert code == 0, err
        async with asyncio.timeout(30):
            out_bytes, err_bytes = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 1  # the instance was cancelled
    assert '"type": "cancelled"' in out_bytes.decode().splitlines()[-1]
    said = err_bytes.decode().splitlines()
    assert all(line.startswith("laneway: ") for line in said), said


LISTENER = (
    "SELECT pid FROM pg_stat_activity"
    " WHERE application_name LIKE 'laneway-listener-%' AND datname = current_database()"
)
LISTENER_ENDED = (
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
    " WHERE application_name LIKE 'laneway-listener-%' AND datname = current_database()"
)


async def test_a_watch_says_when_it_lost_the_database_and_goes_on_after_it_comes_back(
    database_url: str, store: Store, admin: asyncpg.Connection, server_url: str
) -> None:
    # An outside audit: with the database gone, a watch without --url said nothing for as
    # long as it was gone (its hub reconnects by itself), where a --url watch says one line.
    env = environment(database_url)
    watcher = await started_laneway("watch", "--json", env=env)
    assert watcher.stdout is not None
    assert watcher.stderr is not None
    database = await admin.fetchval("SELECT current_database()")
    server = await asyncpg.connect(server_url)  # a database's connections are barred from another
    try:
        async with asyncio.timeout(30):
            await eventually(lambda: admin.fetchval(LISTENER), bool, 30)  # it is listening
            await server.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
            await admin.execute(LISTENER_ENDED)
            said = (await watcher.stderr.readline()).decode()
            await server.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
            enqueued = await make_engine(store, hello).enqueue("hello", {"name": "back"})
            while True:  # it goes on: the events after the loss come
                event = json.loads(await watcher.stdout.readline())
                if event["instanceID"] == str(enqueued.instance_id):
                    break
    finally:
        await server.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
        await server.close()
        watcher.send_signal(signal.SIGINT)
        async with asyncio.timeout(30):
            await watcher.wait()
    assert said == "laneway: lost the connection to the database; reconnecting\n"
    assert event["type"] == "enqueued"
    assert watcher.returncode == 0
