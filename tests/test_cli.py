"""`python -m laneway` as a user runs it: subprocesses against the per-test database.

Exit codes: 0 ok, 1 not found, 2 bad input or a refused configuration.
"""

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit
from uuid import UUID

import pytest

from app.examples import hello
from laneway.api.graphql.schema import export_schema
from laneway.cli import build_parser, main
from laneway.model import Status
from laneway.store import Store
from laneway.store import migrate as migrate_module
from laneway.store.migrate import migrations, redact_url
from tests.engine.helpers import make_engine, until_status
from tests.processes import run_process

ROOT = Path(__file__).resolve().parents[1]


def environment(database_url: str | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANEWAY_", "DATABASE_"))}
    env.pop("HOST", None)
    env.pop("PORT", None)
    if database_url is not None:
        env["DATABASE_URL"] = database_url
    env["LANEWAY_WORKFLOWS"] = "app.examples"
    env["LANEWAY_POLL_SECONDS"] = "0.05"
    env.update(extra)
    return env


async def laneway(
    *args: str, env: Mapping[str, str], timeout: float = 60, stdin: bytes | None = None
) -> tuple[int, str, str]:
    return await run_process(
        [sys.executable, "-m", "laneway", *args], cwd=ROOT, env=env, timeout=timeout, stdin=stdin
    )


async def started_laneway(*args: str, env: Mapping[str, str]) -> asyncio.subprocess.Process:
    """`laneway ARGS` started, not awaited, its stdout and stderr piped (a watch, a worker)."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "laneway",
        *args,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def test_export_schema_prints_the_sdl() -> None:
    code, out, _ = await laneway("export-schema", env=environment(None))
    assert code == 0
    assert out == export_schema()


async def test_enqueue_then_status_prints_json(database_url: str) -> None:
    env = environment(database_url)
    code, out, err = await laneway("enqueue", "hello", "--params", '{"name": "Cli"}', env=env)
    assert code == 0, err
    created: dict[str, Any] = json.loads(out)
    assert created["created"] is True
    instance_id = created["instanceID"]
    UUID(instance_id)
    again = await laneway(
        "enqueue", "hello", "--params", '{"name": "Cli"}', "--idempotency-key", "k", env=env
    )
    assert again[0] == 0
    code, out, err = await laneway("status", instance_id, "--json", env=env)
    assert code == 0, err
    status = json.loads(out)
    assert status["instanceID"] == instance_id
    assert (status["name"], status["status"], status["params"]) == (
        "hello",
        "pending",
        {"name": "Cli"},
    )
    assert isinstance(status["createdAt"], float)
    assert "state" not in status
    # Nothing runs `hello` (no live worker registered it): the reason says so.
    assert status["waitingReason"]["code"] == "NO_WORKER"
    assert "'hello'" in status["waitingReason"]["message"]
    assert status["waitingReason"]["until"] is None
    assert status["concurrencyKey"] is None


async def test_status_prints_the_waiting_reason_of_a_delayed_keyed_instance(
    database_url: str,
) -> None:
    env = environment(database_url)
    code, out, err = await laneway(
        "enqueue",
        "hello",
        "--params",
        '{"name": "K"}',
        "--delay-ms",
        "60000",
        "--concurrency-key",
        "t-7",
        env=env,
    )
    assert code == 0, err
    instance_id = json.loads(out)["instanceID"]
    code, out, err = await laneway("status", instance_id, "--json", env=env)
    assert code == 0, err
    status = json.loads(out)
    assert status["concurrencyKey"] == "t-7"
    reason = status["waitingReason"]
    assert reason["code"] == "DELAYED"
    assert reason["until"] == status["runAfter"]
    assert reason["message"].startswith("delayed until 20")


async def test_bad_input_exits_2_and_unknown_instance_exits_1(database_url: str) -> None:
    env = environment(database_url)
    code, _, err = await laneway("enqueue", "hello", "--params", "{name: x}", env=env)
    assert code == 2
    assert "laneway: enqueue: argument --params: not valid JSON: " in err
    code, _, err = await laneway("enqueue", "hello", "--params", '{"n": NaN}', env=env)
    assert code == 2
    code, _, err = await laneway("enqueue", "nope", "--params", "{}", env=env)
    assert code == 2
    assert "unknown workflow 'nope'" in err
    assert "LANEWAY_WORKFLOWS=app.examples" in err  # where the database mode looked
    assert "--url" in err  # and how to reach a server's workflows instead
    assert "add the module that defines it to LANEWAY_WORKFLOWS" in err
    # An outside audit: with none named, it suggested only --url.
    no_workflows = environment(database_url, LANEWAY_WORKFLOWS="")
    code, _, err = await laneway(
        "create-schedule", "tzl", "ingest", "--every", "1h", env=no_workflows
    )
    assert code == 2
    assert "LANEWAY_WORKFLOWS (not set) are known here, which registers: none" in err
    assert "set LANEWAY_WORKFLOWS to the module that defines it; to go through" in err
    code, _, err = await laneway("status", "00000000-0000-7000-8000-000000000000", env=env)
    assert code == 1
    assert "no instance" in err
    code, _, err = await laneway("status", "not-an-id", env=env)
    assert code == 2
    assert "Traceback" not in err


async def test_serve_refuses_a_public_address_without_tokens() -> None:
    env = environment("postgresql://127.0.0.1:1/none")
    code, _, err = await laneway("serve", "--host", "0.0.0.0", "--port", "0", env=env)
    assert code == 2
    assert "refusing to serve on 0.0.0.0" in err
    assert "LANEWAY_ALLOW_INSECURE" in err


@pytest.mark.parametrize("tokens", ["''", "Q7", "long-enough-token-1,fifteen-chars-x"])
async def test_serve_refuses_a_public_address_with_a_short_token(tokens: str) -> None:
    """An outside audit: a 2-character token (or `''`, quotes and all, from an env file) was
    taken, and `serve --host 0.0.0.0` started with it."""
    env = environment("postgresql://127.0.0.1:1/none", LANEWAY_API_TOKENS=tokens)
    code, _, err = await laneway("serve", "--host", "0.0.0.0", "--port", "0", env=env)
    assert code == 2
    place = "2" if "," in tokens else "1"
    assert f"refusing to serve on 0.0.0.0: LANEWAY_API_TOKENS token {place} is shorter" in err
    assert "LANEWAY_ALLOW_INSECURE" in err
    for token in tokens.split(","):
        assert token not in err


async def test_bad_settings_exit_2() -> None:
    code, _, err = await laneway("export-schema", env=environment(None, PORT="99999"))
    assert code == 2
    assert "PORT" in err


async def test_worker_runs_instances_and_stops_on_sigterm(database_url: str, store: Store) -> None:
    env = environment(database_url)
    worker = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "laneway",
        "worker",
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        code, out, err = await laneway("enqueue", "hello", "--params", '{"name": "W"}', env=env)
        assert code == 0, err
        instance_id = UUID(json.loads(out)["instanceID"])
        async with asyncio.timeout(30):
            while True:
                record = await store.get_instance(instance_id)
                if record is not None and record.status == Status.COMPLETED:
                    break
                await asyncio.sleep(0.05)
        assert record.result == {"greeting": "Hello, W!"}
    finally:
        worker.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            _, err_bytes = await worker.communicate()
    assert worker.returncode == 0, err_bytes.decode()
    assert b"worker stopped" in err_bytes


async def test_watch_json_prints_one_line_per_event_until_interrupted(database_url: str) -> None:
    env = environment(database_url)
    code, out, err = await laneway("enqueue", "hello", "--params", '{"name": "Wa"}', env=env)
    assert code == 0, err
    instance_id = json.loads(out)["instanceID"]
    watcher = await started_laneway(
        "watch", "--instance", instance_id, "--after", "0", "--json", env=env
    )
    assert watcher.stdout is not None
    try:
        async with asyncio.timeout(30):
            line = json.loads(await watcher.stdout.readline())
    finally:
        watcher.send_signal(signal.SIGINT)
        async with asyncio.timeout(30):
            await watcher.wait()
    assert (line["type"], line["instanceID"], line["name"]) == ("enqueued", instance_id, "hello")
    assert watcher.returncode == 0


async def test_migrate_reports_nothing_left_on_a_migrated_database(database_url: str) -> None:
    code, out, err = await laneway("migrate", env=environment(database_url))
    assert code == 0, err
    report = json.loads(out)
    assert report["applied"] == []
    assert report["embedded"] is False
    assert report["database"] == redact_url(database_url)
    assert report["version"] == migrations()[-1].name


def test_migrate_refuses_with_exit_1_when_the_install_has_no_migrations(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(migrate_module, "MIGRATIONS_PACKAGE", "laneway.engine")
    code = main(["migrate"], environ={"DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"})
    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == ""
    assert "no migration files found" in captured.err


def test_a_worker_starts_without_loading_the_api_stack() -> None:
    # A replacement worker is claiming sooner: Strawberry, Starlette and uvicorn cost about a
    # second of imports that `laneway worker` never uses.
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, laneway.cli; print(sorted({'strawberry', 'starlette', 'uvicorn'}"
            " & {name.split('.')[0] for name in sys.modules}))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout.strip() == "[]"


async def test_status_prints_a_table_for_a_person(database_url: str) -> None:
    env = environment(database_url, COLUMNS="120")
    code, out, err = await laneway("enqueue", "hello", "--params", '{"name": "T"}', env=env)
    assert code == 0, err
    instance_id = json.loads(out)["instanceID"]
    code, out, err = await laneway("status", instance_id, env=env)
    assert code == 0, err
    rows = {line.split(None, 1)[0]: line for line in out.splitlines() if line.strip()}
    assert instance_id in rows["instance"]
    assert "hello" in rows["workflow"]
    assert "pending" in rows["status"]
    assert "NO_WORKER" in rows["waiting"]
    # A human time, not an epoch float.
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \((just now|\d+ s ago)\)", rows["created"])
    assert '{"name": "T"}' in rows["params"]


async def test_cancel_and_retry_act_and_refuse_what_they_must(database_url: str) -> None:
    env = environment(database_url)
    code, out, err = await laneway("enqueue", "hello", "--params", '{"name": "C"}', env=env)
    assert code == 0, err
    instance_id = json.loads(out)["instanceID"]
    code, _, err = await laneway("retry", instance_id, env=env)
    assert code == 1  # a pending instance has nothing to retry (CONFLICT)
    assert "while it is pending" in err
    code, out, err = await laneway("cancel", instance_id, env=env)
    assert code == 0, err
    assert json.loads(out) == {"instanceID": instance_id, "status": "cancelled"}
    code, _, err = await laneway("retry", instance_id, env=env)
    assert code == 1  # only a failed instance is retried (tests/test_cli_watch.py)
    assert "while it is cancelled" in err
    code, _, err = await laneway("cancel", "00000000-0000-7000-8000-000000000000", env=env)
    assert code == 1
    assert "no instance" in err
    code, _, err = await laneway("cancel", "nope", env=env)
    assert code == 2
    assert "not an instance id" in err


async def test_workflows_and_queues_print_tables_and_json(database_url: str) -> None:
    env = environment(database_url, COLUMNS="200")
    code, out, err = await laneway("workflows", "--json", env=env)
    assert code == 0, err
    listed = {w["name"]: w for w in json.loads(out)}
    assert listed["countdown"]["kind"] == "handlers"
    assert "report" in listed
    code, out, err = await laneway("workflows", env=env)
    assert code == 0, err
    assert any(line.split()[:3] == ["countdown", "1", "countdown"] for line in out.splitlines()), (
        out
    )
    assert listed["countdown"]["versions"] == ["1"]
    code, out, err = await laneway("enqueue", "hello", "--params", '{"name": "Q"}', env=env)
    assert code == 0, err
    code, out, err = await laneway("queues", "--json", env=env)
    assert code == 0, err
    default = next(q for q in json.loads(out) if q["name"] == listed["hello"]["queue"])
    assert default["counts"]["pending"] == 1
    code, out, err = await laneway("queues", env=env)
    assert code == 0, err
    assert "pend" in out.splitlines()[2]  # the header row
    assert any(default["name"] in line and " 1 " in line for line in out.splitlines()), out


QUEUE_HEADERS = ["queue", "limits", "pend", "run", "paused", "wait", "done", "failed", "cancel"]


async def test_queues_keep_their_labels_on_a_narrow_terminal(
    database_url: str, store: Store
) -> None:
    # Under about 65 columns the table used to break its headers and queue names into a
    # letter per line, and at 50 to hide them and cut the numbers ("12…"). Now the counts an
    # operator looks at last are left out first, and a caption says which.
    engine = make_engine(store, hello)
    for _ in range(12):
        await engine.enqueue("hello", {"name": "N"})
    for columns in (64, 50, 40, 30):
        code, out, err = await laneway(
            "queues", env=environment(database_url, COLUMNS=str(columns))
        )
        assert code == 0, err
        lines = out.splitlines()
        assert all(len(line.rstrip()) <= columns for line in lines), out
        header = lines[2].split()
        assert header == [h for h in QUEUE_HEADERS if h in header], out  # whole, in order
        assert header[:2] == ["queue", "pend"] or header[:3] == ["queue", "limits", "pend"], out
        left_out = ", ".join(h for h in QUEUE_HEADERS if h not in header)
        assert " ".join(out.split()).endswith(f"Left out to fit {columns} columns: {left_out}")
        assert any(line.split()[:1] == ["hello"] and " 12 " in f"{line} " for line in lines), out
        assert "…" not in out


def _subcommands() -> list[str]:
    """Every subcommand the parser has (not a list kept by hand: a new one is checked too)."""
    (choices,) = [
        action.choices
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    ]
    return sorted(choices)


PROCESS_COMMANDS = ("serve", "worker", "migrate", "export-schema")


def _demo_workflows() -> set[str]:
    """The names of the repository's demo workflows (app/examples.py): not in the wheel."""
    from laneway.engine.registry import WorkflowRegistry

    return set(WorkflowRegistry.from_modules(["app.examples"]).names())


@pytest.mark.parametrize("command", ["", *_subcommands()])
def test_no_help_gives_an_example_that_only_the_repository_has(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # `laneway enqueue --help` showed `laneway enqueue hello`: from an installed wheel, there
    # is no `hello` (nor app/), so the example failed as it was typed.
    with pytest.raises(SystemExit):
        main([command, "--help"] if command else ["--help"])
    text = capsys.readouterr().out
    named = set(re.findall(r"[\w-]+", text.split("Example", 1)[-1]))
    assert not named & _demo_workflows(), text
    assert not re.search(r"\bapp[./]", text), text  # the repository's service package


@pytest.mark.parametrize("command", _subcommands())
def test_every_help_says_what_it_uses_and_gives_an_example(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    assert "Example" in text
    assert f"laneway {command}" in text.split("Example", 1)[1]
    if command != "export-schema":
        assert "DATABASE_URL" in text
    if command not in PROCESS_COMMANDS:
        assert "--url BASE" in text
        assert "LANEWAY_TOKEN" in text
        assert "LANEWAY_WORKFLOWS" in text  # which workflows the database mode knows


def _documented_exit_codes() -> set[int]:
    """The exit codes docs/cli.md explains in its "Exit codes" section."""
    section = (ROOT / "docs" / "cli.md").read_text().split("## Exit codes", 1)[1]
    section = section.split("\n## ", 1)[0]
    return {int(code) for code in re.findall(r"(?:^|; )(\d+) ", section, flags=re.MULTILINE)}


@pytest.mark.parametrize("command", ["", *_subcommands()])
def test_every_help_ends_with_its_exit_codes_as_documented(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"] if command else ["--help"])
    assert exited.value.code == 0
    last = capsys.readouterr().out.rstrip().split("\n\n")[-1].splitlines()
    assert last[0] == "Exit codes:", last
    codes = [int(line.split()[0]) for line in last[1:] if not line.startswith(" " * 7)]
    assert codes[0] == 0
    assert codes == sorted(set(codes))
    assert set(codes) <= _documented_exit_codes() == {0, 1, 2, 3, 130, 141}
    meanings: dict[int, str] = {}
    for line in last[1:]:  # a meaning wrapped onto more lines goes on with them
        if line[2] != " ":
            code, meaning = line.split(None, 1)
            meanings[int(code)] = meaning
        else:
            meanings[int(code)] += " " + line.strip()
    if command == "watch":
        assert meanings[0].startswith("the watched instance completed")
        assert 130 not in meanings  # Ctrl-C is how a watch of every instance ends: 0
    if command == "preflight":
        assert meanings[1].startswith("something would be")
    if command in ("serve", "worker", "migrate"):  # each refuses a newer release's schema
        assert "a newer release migrated it" in meanings[1]
    if command == "worker":  # as docs/cli.md says: a metrics port in use is exit 1 too
        assert "--metrics-port in use" in meanings[1]


def test_usage_errors_name_what_is_wanted_not_internals(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["watch", "--after", "x"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--after: must be a whole number, not 'x'" in err
    assert "event_id" not in err
    with pytest.raises(SystemExit):
        main(["enqueue", "hello", "--delay-ms", "-1"])
    assert "--delay-ms: must not be negative" in capsys.readouterr().err
    for infinite in ("nan", "inf"):  # nan said "must not be negative"; inf was taken
        with pytest.raises(SystemExit):
            main(["enqueue", "hello", "--delay-ms", infinite])
        assert f"--delay-ms: must be a finite number, not '{infinite}'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["enqueue", "hello", "--priority", "abc"], "laneway: enqueue: argument --priority"),
        (["serve", "--port", "99999"], "laneway: serve: argument --port"),
        (["nope"], "laneway: argument COMMAND: invalid choice: 'nope'"),
        (
            ["watch", "--after", str(2**63)],  # a bigint overflow, deep in the driver, it was
            "laneway: watch: argument --after: must be an event id from 0 to 9223372036854775807",
        ),
        ([], "laneway: the following arguments are required: COMMAND"),
        # An unknown argument points to the help of its command (it pointed to laneway's).
        (
            ["enqueue", "hello", "--bogus"],
            "laneway: enqueue: unrecognized arguments: --bogus (see `laneway enqueue --help`)",
        ),
        (
            ["schedules", "extra", "--json"],
            "laneway: schedules: unrecognized arguments: extra (see `laneway schedules --help`)",
        ),
    ],
)
def test_a_usage_error_is_one_laneway_line_like_every_error(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(says), err
    assert len(err.strip().splitlines()) == 1, err
    assert err.rstrip().endswith("--help`)")


async def test_token_without_url_is_refused() -> None:
    code, _, err = await laneway(
        "status", "00000000-0000-7000-8000-000000000000", "--token", "t", env=environment(None)
    )
    assert code == 2
    assert "--token is for a server: give its --url too" in err


@pytest.mark.parametrize("command", ["worker", "serve"])
async def test_serve_and_worker_refuse_to_start_without_workflows(command: str) -> None:
    env = environment("postgresql://nobody@127.0.0.1:1/none", LANEWAY_WORKFLOWS="")
    code, _, err = await laneway(command, env=env)
    assert code == 2
    assert "no workflows to run: LANEWAY_WORKFLOWS is not set" in err
    assert "--allow-no-workflows" in err
    assert len(err.strip().splitlines()) == 1, err


async def test_preflight_without_workflows_names_what_it_reads_them_from() -> None:
    env = environment(None, LANEWAY_WORKFLOWS="")
    url = ("--url", "http://127.0.0.1:1")  # never reached: the modules are read first
    code, _, err = await laneway("preflight", *url, env=env)
    assert code == 2
    assert "no workflows to run: LANEWAY_WORKFLOWS is not set" in err
    assert "--allow-no-workflows" not in err  # preflight has no such option
    code, _, err = await laneway("preflight", "--workflows", " , ", *url, env=env)
    assert code == 2
    assert "no workflows to run: --workflows names no module" in err
    assert "as in --workflows workflows" in err


def _with(query: str, parameter: str) -> str:
    return f"{query}&{parameter}" if query else parameter


def unusable_database_urls(database_url: str) -> list[tuple[str, int, str]]:
    """(DATABASE_URL, exit code, what the one line says) for databases a command cannot use."""
    parts = urlsplit(database_url)
    missing = urlunsplit(parts._replace(path="/laneway_no_such_database"))
    return [
        ("postgresql://postgres@127.0.0.1:1/none", 1, "cannot use the database: "),
        (missing, 1, 'database "laneway_no_such_database" does not exist'),
        ("not-a-url", 2, "DATABASE_URL must be a PostgreSQL URL, as in postgresql://"),
        ("postgresql://[::1", 2, "DATABASE_URL is not a valid URL: Invalid IPv6 URL"),
        (
            urlunsplit(parts._replace(query="sslmode=bogus")),
            2,
            "DATABASE_URL is not a PostgreSQL URL it can use: `sslmode` parameter must be",
        ),
        (  # an option the server refuses as the session starts (a FATAL error); the URL's
            # own query kept (the embedded server's socket folder is its `host`)
            urlunsplit(
                parts._replace(query=_with(parts.query, "options=-c%20statement_timeout%3Dabc"))
            ),
            2,
            "the database refused DATABASE_URL's options: invalid value for parameter",
        ),
    ]


async def test_a_database_it_cannot_use_is_one_line_not_a_traceback(database_url: str) -> None:
    for url, exit_code, says in unusable_database_urls(database_url):
        for command in (("migrate",), ("status", "00000000-0000-7000-8000-000000000000")):
            code, _, err = await laneway(*command, env=environment(url))
            assert code == exit_code, err
            assert err.startswith("laneway: "), err
            assert says in err, err
            assert len(err.strip().splitlines()) == 1, err


async def test_serve_says_in_one_line_why_it_did_not_start(database_url: str) -> None:
    url, _, says = unusable_database_urls(database_url)[0]
    code, _, err = await laneway("serve", "--port", "0", env=environment(url))
    assert code == 1, err
    assert err.strip().splitlines()[-1].startswith("laneway: " + says), err
    assert "Traceback" not in err, err  # the one line says it all: no lifespan traceback first
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = str(taken.getsockname()[1])
        code, _, err = await laneway("serve", "--port", port, env=environment(database_url))
    assert code == 1, err
    assert err.strip() == f"laneway: cannot listen on 127.0.0.1:{port}: Address already in use"


def unresolved(host: str) -> str:
    """What the name service says of `host`, which does not resolve."""
    with pytest.raises(socket.gaierror) as failed:
        socket.getaddrinfo(host, 0)
    assert failed.value.strerror
    return failed.value.strerror


async def test_serve_says_why_when_its_host_name_does_not_resolve() -> None:
    # It said "Unknown error -2": os.strerror of the name lookup's own (negative) code.
    env = environment(None, LANEWAY_ALLOW_INSECURE="1")
    code, _, err = await laneway("serve", "--host", "not a host", "--port", "18404", env=env)
    assert code == 1, err
    assert err == f"laneway: cannot listen on not a host:18404: {unresolved('not a host')}\n"
    assert "Unknown error" not in err


def write_module(folder: Path, name: str, text: str) -> None:
    (folder / f"{name}.py").write_text(text)


FAILING_APP = """\
import contextlib

from starlette.applications import Starlette


@contextlib.asynccontextmanager
async def lifespan(app):
    raise RuntimeError("boom")
    yield


def build(settings):
    return Starlette(lifespan=lifespan)
"""


BROKEN_FACTORIES = """\
def raising(settings):
    raise RuntimeError("boom at startup")
"""


async def test_serve_says_in_one_line_why_an_app_factory_failed(tmp_path: Path) -> None:
    # The factory runs after the port is taken (a port in use is said first), and its failure
    # is one line naming where, as a workflow module's is.
    write_module(tmp_path, "factories", BROKEN_FACTORIES)
    write_module(tmp_path, "unimportable", "value = undefined_name\n")
    write_module(tmp_path, "importing", "import nonexistent_mod_zz\n")  # it is there
    # Its own code's AttributeError is a failed import too, not a name the module lacks.
    write_module(tmp_path, "attribute", "import os\nos.no_such_function()\n")
    laneway_script = str(Path(sys.executable).parent / "laneway")
    env = environment("postgresql://nobody@127.0.0.1:1/none", LANEWAY_WORKFLOWS="")
    for app, port_taken, exit_code, says in (
        ("factories:raising", False, 1, "the app did not start: RuntimeError: boom at startup"),
        ("unimportable:build", False, 2, "its module failed while importing: NameError"),
        ("importing:build", False, 2, "its module failed while importing: ModuleNotFound"),
        ("attribute:build", False, 2, "its module failed while importing: AttributeError"),
        ("factories:missing", False, 2, "module 'factories' has no attribute 'missing'"),
        ("factories:raising", True, 1, "laneway: cannot listen on 127.0.0.1:"),
    ):
        with socket.create_server(("127.0.0.1", 0)) as taken:
            port = str(taken.getsockname()[1]) if port_taken else "0"
            code, _, err = await run_process(
                [laneway_script, "serve", "--port", port, "--app", app],
                cwd=tmp_path, env=env, timeout=60,
            )  # fmt: skip
        assert code == exit_code, err
        assert err.startswith("laneway: "), err
        assert says in err, err
        assert len(err.strip().splitlines()) == 1, err
        if not port_taken and app != "factories:missing":
            assert f"{app.partition(':')[0]}.py, line " in err, err  # where it failed


async def test_serve_keeps_the_traceback_of_an_app_that_fails_to_start(tmp_path: Path) -> None:
    # Not the database: the frames show where the app went wrong, then the one line.
    write_module(tmp_path, "failing_app", FAILING_APP)
    laneway_script = str(Path(sys.executable).parent / "laneway")
    env = environment("postgresql://nobody@127.0.0.1:1/none", LANEWAY_WORKFLOWS="")
    code, _, err = await run_process(
        [laneway_script, "serve", "--port", "0", "--app", "failing_app:build"],
        cwd=tmp_path, env=env, timeout=60,
    )  # fmt: skip
    assert code == 1, err
    assert err.strip().splitlines()[-1] == "laneway: the app did not start: RuntimeError: boom"
    assert "Traceback" in err, err
    assert "failing_app.py" in err, err


async def test_a_module_that_cannot_be_imported_is_one_line_exit_2(tmp_path: Path) -> None:
    write_module(tmp_path, "broken", "import os\nvalue = undefined_name\n")
    # It is there, but a module it imports is not: its own code failed, it is not missing.
    write_module(tmp_path, "bad2", "import os\nimport nonexistent_mod_zz\n")
    # Refused by a check inside Laneway: the line named is the module's own, which made it
    write_module(
        tmp_path,
        "misnamed",
        "from laneway import Done, Workflow\n"
        "flow = Workflow('no spaces', handlers={'a': lambda c, p: Done()}, initial='a')\n",
    )
    laneway_script = str(Path(sys.executable).parent / "laneway")
    for modules, expected, where in (
        ("etl", "cannot import workflow module 'etl': No module named 'etl'", None),
        ("nowhere.etl", "cannot import workflow module 'nowhere.etl': No module named", None),
        (
            "broken",
            "workflow module 'broken' failed while importing: NameError",
            "broken.py, line 2",
        ),
        (
            "bad2",
            "workflow module 'bad2' failed while importing: ModuleNotFoundError: No module"
            " named 'nonexistent_mod_zz'",
            "bad2.py, line 2",
        ),
        (
            "misnamed",
            "workflow module 'misnamed' failed while importing: InvalidInputError: workflow"
            " name must be",
            "misnamed.py, line 2",
        ),
    ):
        env = environment("postgresql://nobody@127.0.0.1:1/none", LANEWAY_WORKFLOWS=modules)
        code, _, err = await run_process(
            [laneway_script, "serve", "--port", "0"], cwd=tmp_path, env=env, timeout=60
        )
        assert code == 2, err
        assert expected in err
        assert "Traceback" not in err
        assert len(err.strip().splitlines()) == 1, err
        if where is not None:
            assert where in err, err


TWO_OF_ONE_NAME = """\
from laneway import Done, Workflow


async def _one(ctx, params):
    return Done(1)


first = Workflow("dup", handlers={"one": _one}, initial="one")
second = Workflow("dup", handlers={"two": _one}, initial="two")
"""


async def test_two_different_workflows_of_one_name_and_version_are_refused(
    tmp_path: Path, database_url: str
) -> None:
    # Not the first kept and the second dropped without a word. One object that two modules
    # hold (one imports it from the other) is one workflow, and no problem.
    write_module(tmp_path, "dups", TWO_OF_ONE_NAME)
    write_module(tmp_path, "etl", ETL)
    write_module(tmp_path, "reexports", "from etl import etl\n")
    laneway_script = str(Path(sys.executable).parent / "laneway")
    env = environment(None, LANEWAY_WORKFLOWS="dups")
    code, _, err = await run_process(
        [laneway_script, "preflight", "--url", "http://127.0.0.1:1"], cwd=tmp_path, env=env,
        timeout=60,
    )  # fmt: skip
    assert code == 2, err
    assert err.strip() == (
        "laneway: workflow module 'dups': a different workflow named 'dup' is registered"
        " with version '1'"
    )
    env = environment(database_url, LANEWAY_WORKFLOWS="etl,reexports")
    code, out, err = await run_process(
        [laneway_script, "workflows"], cwd=tmp_path, env=env, timeout=60
    )
    assert code == 0, err
    assert [line.split()[0] for line in out.splitlines() if "handlers" in line] == ["etl"], out


ETL = """\
from laneway import Done, Workflow


async def _load(ctx, params):
    return Done({"loaded": True})


etl = Workflow("etl", handlers={"load": _load}, initial="load")
"""


async def test_worker_and_enqueue_import_workflows_from_the_current_folder(
    database_url: str, store: Store, tmp_path: Path
) -> None:
    # The console script (not `python -m`, which adds the folder itself), as a user runs it.
    write_module(tmp_path, "etl", ETL)
    laneway_script = str(Path(sys.executable).parent / "laneway")
    env = environment(database_url, LANEWAY_WORKFLOWS="etl")
    worker = await asyncio.create_subprocess_exec(
        laneway_script, "worker", cwd=tmp_path, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        code, out, err = await run_process(
            [laneway_script, "enqueue", "etl"], cwd=tmp_path, env=env, timeout=60
        )
        assert code == 0, err
        instance_id = UUID(json.loads(out)["instanceID"])
        done = await until_status(store, instance_id, Status.COMPLETED, timeout=30)
        assert done.result == {"loaded": True}
    finally:
        worker.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            _, err_bytes = await worker.communicate()
    assert worker.returncode == 0, err_bytes.decode()


async def test_worker_starts_with_no_workflows_when_told_to(database_url: str) -> None:
    env = environment(database_url, LANEWAY_WORKFLOWS="")
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "laneway", "worker", "--allow-no-workflows", cwd=ROOT, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert worker.stderr is not None
    try:
        async with asyncio.timeout(30):
            while b"worker started" not in (line := await worker.stderr.readline()):
                assert line, "the worker ended before it started"
    finally:
        worker.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            await worker.communicate()
    assert worker.returncode == 0
