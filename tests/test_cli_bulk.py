"""`laneway cancel|retry|resume --filter …` as a user runs it: subprocesses on the per-test
database and through --url, a dry run first, and a confirmation (--yes, or a terminal's yes)."""

import asyncio
import dataclasses
import json
import os
import pty
import signal
import sys
from typing import Any

from app.examples import hello
from laneway.engine.requests import EnqueueRequest
from laneway.store import Store
from tests.api.conftest import TOKEN, live_server, make_settings
from tests.engine.helpers import eventually, make_engine
from tests.test_cli import ROOT, environment, laneway
from tests.test_cli_remote import client_env


async def _enqueue(store: Store, n: int) -> list[str]:
    engine = make_engine(store, hello)
    ids: list[str] = []
    for start in range(0, n, 10_000):  # the most one call takes
        results = await engine.enqueue_many(
            [EnqueueRequest(name="hello", params={"name": "Bulk"})] * min(10_000, n - start)
        )
        ids += [str(r.instance_id) for r in results]
    return ids


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


async def _at_terminal(
    *args: str, env: dict[str, str], answer: str | signal.Signals
) -> tuple[int, str, str]:
    """`laneway ARGS` with a pseudo-terminal as stdin, answering its question with `answer`: a
    line, or a signal (Ctrl-C at the terminal is SIGINT) and nothing typed."""
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
            if isinstance(answer, str):
                os.write(leader, answer.encode() + b"\n")
            else:
                process.send_signal(answer)
            out, err = await process.communicate()
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
        if process.returncode is None:
            process.kill()
            await process.wait()
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


async def test_one_matching_instance_is_asked_about_in_the_singular(
    store: Store, database_url: str
) -> None:
    # It asked "Cancel 1 instances?" and said "1 instances match; pass --yes to cancel them".
    await _enqueue(store, 1)
    env = environment(database_url)
    code, _, err = await _at_terminal("cancel", "--filter", "queue=hello", env=env, answer="n")
    assert code == 2
    assert "Cancel 1 instance? [y/N]" in err
    code, _, err = await _without_terminal("cancel", "--filter", "queue=hello", env=env)
    assert code == 2
    assert err == (
        "laneway: 1 instance matches; pass --yes to cancel it (or --dry-run to only count it)\n"
    )
    assert await _statuses(store) == ["pending"]


async def test_ctrl_c_at_the_question_ends_at_once_and_changes_nothing(
    store: Store, database_url: str
) -> None:
    # The answer used to be read by a thread that the runner waited for: Ctrl-C did nothing
    # until Enter (_at_terminal's deadline fails it here).
    await _enqueue(store, 2)
    env = environment(database_url)
    code, out, err = await _at_terminal(
        "cancel", "--filter", "name=hello", env=env, answer=signal.SIGINT
    )
    assert code == 130, err
    assert out == ""
    assert err.endswith("[y/N] \nlaneway: interrupted: nothing was changed\n"), err
    assert await _statuses(store) == ["pending"] * 2


async def test_ctrl_c_during_a_bulk_action_says_it_may_be_unfinished_and_a_repeat_ends_it(
    store: Store, database_url: str
) -> None:
    # It used to exit 0 and print nothing, although batches were committed.
    many = 20_000  # batches of 100: it is still at work when the first ones are seen
    await _enqueue(store, many)
    env = environment(database_url)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "laneway", "cancel", "--filter", "name=hello", "--yes",
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        await eventually(lambda: _count(store, "cancelled"), bool, timeout=60)
        process.send_signal(signal.SIGINT)
        async with asyncio.timeout(60):
            out, err = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 130, err
    assert out == b""
    assert err.decode() == (
        f"laneway: interrupted: some of the {many} instances may have changed; run the same"
        " command again to finish (or add --dry-run to count what is left)\n"
    )
    assert 0 < await _count(store, "cancelled") < many
    code, out_text, err_text = await laneway("cancel", "--filter", "name=hello", "--yes", env=env)
    assert code == 0, err_text
    assert 0 < json.loads(out_text)["changed"] < many
    assert await _count(store, "cancelled") == many


async def _count(store: Store, status: str) -> int:
    async with store.connection() as conn:
        counted: int = await conn.fetchval(
            "SELECT count(*) FROM laneway.instances WHERE status = $1", status
        )
    return counted


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


async def test_a_bulk_action_cut_off_by_the_servers_deadline_says_to_run_it_again(
    store: Store, database_url: str
) -> None:
    # It used to say "cannot serve this now", as if nothing had been done.
    # Seconds of batches (about 15,000 instances a second): the dry run fits in the deadline,
    # the action does not.
    many = 80_000
    await _enqueue(store, many)
    # 2 s: the server stops 0.4 s before the deadline, room for a batch on a loaded machine
    # (at 1 s, 0.2 s, a batch there ran past it now and then).
    settings = make_settings(database_url, engine_enabled=False, operation_timeout_seconds=2)
    async with live_server(settings) as server:
        base = ("--filter", "name=hello", "--yes", "--url", f"http://127.0.0.1:{server.port}")
        code, out, err = await laneway("cancel", *base, env=client_env())
        assert code == 1, err
        assert out == ""
        done = await _count(store, "cancelled")
        assert 0 < done < many
        # The server stops between batches before its deadline, and says how far it got.
        assert err == (
            f"laneway: the server at http://127.0.0.1:{server.port} stopped it at its time"
            f" limit (LANEWAY_OPERATION_TIMEOUT) after it changed {done} of the {many}"
            " instances it matched: run the same command again to finish it (it changes each"
            " instance at most once)\n"
        )
    # Again, where the server lets it run to the end: the rest, each once.
    async with live_server(dataclasses.replace(settings, operation_timeout_seconds=0)) as server:
        url = f"http://127.0.0.1:{server.port}"
        code, out, err = await laneway("cancel", *base[:3], "--url", url, env=client_env())
    assert code == 0, err
    assert json.loads(out)["changed"] == many - done
    assert await _count(store, "cancelled") == many
