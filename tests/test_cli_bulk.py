"""`laneway cancel|retry|resume --filter …` as a user runs it: subprocesses on the per-test
database and through --url, a dry run first, and a confirmation (--yes, or a terminal's yes)."""

import asyncio
import json
import os
import pty
import sys
from typing import Any

from app.examples import hello
from laneway.engine.requests import EnqueueRequest
from laneway.store import Store
from tests.api.conftest import TOKEN, live_server, make_settings
from tests.engine.helpers import make_engine
from tests.test_cli import ROOT, environment, laneway
from tests.test_cli_remote import client_env


async def _enqueue(store: Store, n: int) -> list[str]:
    engine = make_engine(store, hello)
    results = await engine.enqueue_many(
        [EnqueueRequest(name="hello", params={"name": "Bulk"}) for _ in range(n)]
    )
    return [str(r.instance_id) for r in results]


async def _statuses(store: Store) -> list[str]:
    async with store.connection() as conn:
        rows = await conn.fetch("SELECT status FROM laneway.instances ORDER BY status")
    return [row["status"] for row in rows]


async def _without_terminal(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    """`laneway ARGS` with stdin from /dev/null: no terminal to ask at."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "laneway",
        *args,
        cwd=ROOT,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(60):
        out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def _at_terminal(*args: str, env: dict[str, str], answer: str) -> tuple[int, str, str]:
    """`laneway ARGS` with a pseudo-terminal as stdin, answering its question with `answer`."""
    leader, follower = pty.openpty()
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "laneway",
            *args,
            cwd=ROOT,
            env=env,
            stdin=follower,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        os.close(follower)
        follower = -1
        assert process.stderr is not None
        async with asyncio.timeout(60):
            asked = await process.stderr.readuntil(b"[y/N] ")
            os.write(leader, answer.encode() + b"\n")
            out, err = await process.communicate()
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    assert process.returncode is not None
    return process.returncode, out.decode(), asked.decode() + err.decode()


async def test_dry_run_then_yes_then_a_repeat_in_database_mode(
    store: Store, database_url: str
) -> None:
    ids = await _enqueue(store, 3)
    env = environment(database_url)
    code, out, err = await laneway("cancel", "--filter", "name=hello", "--dry-run", env=env)
    assert code == 0, err
    dry: dict[str, Any] = json.loads(out)
    assert (dry["matched"], dry["changed"]) == (3, 0)
    assert dry["sampleIDs"] == sorted(ids, reverse=True)  # one enqueue: one creation time
    assert await _statuses(store) == ["pending"] * 3
    code, out, err = await _without_terminal("cancel", "--filter", "name=hello", env=env)
    assert code == 2
    assert "3 instances match; pass --yes" in err
    assert await _statuses(store) == ["pending"] * 3
    code, out, err = await laneway(
        "cancel", "--filter", "name=hello", "--filter", "status=pending", "--yes", env=env
    )
    assert code == 0, err
    assert json.loads(out)["changed"] == 3
    assert await _statuses(store) == ["cancelled"] * 3
    code, out, err = await laneway("cancel", "--filter", "name=hello", "--yes", env=env)
    assert code == 0, err
    assert json.loads(out) == {"matched": 0, "changed": 0, "sampleIDs": []}


async def test_a_terminal_is_asked_and_only_yes_goes_on(store: Store, database_url: str) -> None:
    await _enqueue(store, 2)
    env = environment(database_url)
    code, _, err = await _at_terminal("cancel", "--filter", "queue=hello", env=env, answer="n")
    assert code == 2
    assert "Cancel 2 instances? [y/N]" in err
    assert "nothing was changed" in err
    assert await _statuses(store) == ["pending"] * 2
    code, out, err = await _at_terminal("cancel", "--filter", "queue=hello", env=env, answer="y")
    assert code == 0, err
    assert json.loads(out)["changed"] == 2
    assert await _statuses(store) == ["cancelled"] * 2


async def test_bad_filters_exit_2_and_the_single_cancel_still_works(
    store: Store, database_url: str
) -> None:
    (one, _) = await _enqueue(store, 2)
    env = environment(database_url)
    for bad in ("colour=red", "name", "created-after=yesterday", "status=done"):
        code, _, err = await laneway("cancel", "--filter", bad, "--yes", env=env)
        assert code == 2, bad
        assert "Traceback" not in err
    code, _, err = await laneway("resume", "--filter", "name=hello", "--input", "{}", env=env)
    assert code == 2
    assert "no --input" in err
    code, _, err = await laneway("cancel", env=env)
    assert code == 2
    assert "an instance ID or --filter" in err
    code, out, err = await laneway("cancel", one, env=env)
    assert code == 0, err
    assert json.loads(out) == {"instanceID": one, "status": "cancelled"}
    assert await _statuses(store) == ["cancelled", "pending"]


async def test_retry_and_resume_through_a_server(store: Store, database_url: str) -> None:
    ids = await _enqueue(store, 3)
    async with store.connection() as conn:
        await conn.execute(
            "UPDATE laneway.instances SET status = 'failed', attempts = 1,"
            " created_at = now() - interval '2 days' WHERE instance_id = ANY($1::uuid[])",
            ids[:2],
        )
    settings = make_settings(database_url, api_tokens=(TOKEN,), engine_enabled=False)
    async with live_server(settings) as server:
        url = f"http://127.0.0.1:{server.port}"
        base = ("--url", url, "--token", TOKEN)
        code, out, err = await laneway(
            "retry", "--filter", "created-before=2100-01-01T00:00:00+01:00", *base, "--yes",
            env=client_env(),
        )  # fmt: skip
        assert code == 0, err
        assert json.loads(out)["changed"] == 2
        code, out, err = await laneway(
            "resume", "--filter", "name=hello", *base, "--dry-run", env=client_env()
        )
        assert code == 0, err
        assert json.loads(out)["matched"] == 0
        code, _, err = await laneway(
            "cancel", "--filter", "name=hello", "--url", url, "--yes", env=client_env()
        )
        assert code == 2  # no token: UNAUTHENTICATED
    assert await _statuses(store) == ["pending"] * 3
