"""The README's code blocks run as written, in a fresh folder outside the repository.

Every python and toml block starts with a `# NAME` comment: the file it is. The tests write
them all into a temporary folder outside the checkout and run them there with the repository's
.venv (where laneway is installed, as a user's project would have it), on the test server: a
fresh database per test as DATABASE_URL, the server itself as LANEWAY_TEST_DATABASE_URL for
the pytest example. The `text` block is what `python main.py` prints. The python blocks pass
`mypy --strict` too, so that a project that copies them and checks strictly stays clean.
`telemetry.py` is run with a worker by tests/test_readme_traces.py.

Shell blocks are run too, each in its own way (SHELL_CHECKS names them; a block that no check
claims fails `test_every_block_is_checked`):

- the `laneway migrate` / `laneway worker` block and the enqueue/status block run line by line
  in the fresh folder (`export` lines set the environment; the DATABASE_URL the block exports
  is replaced by the test's database, INSTANCE_ID by the id the enqueue printed), and the
  worker is stopped with SIGTERM once the instance completed;
- `laneway serve --port 8000` runs on a free port instead, until /healthz and GraphQL answer;
- the curl block runs against the service `make run` serves (`python -m app`, on a free port);
- `python -m pytest -q` runs the README's testing example;
- the `make run` / `make test` block is checked against the Makefile, not run (`make test` is
  the whole suite, and the curl block already exercises what `make run` serves);
- the dockerfile block is checked against the repository's Dockerfile (the image it builds
  on: its user, its PYTHONPATH, its entry point), not built: building images is not a test;
- the install block is checked against tests/test_wheel.py, which builds the wheel with that
  same `pip wheel --no-deps` and installs it in a fresh venv (an e2e test, minutes long).
"""

import asyncio
import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import tomllib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.engine.helpers import eventually
from tests.processes import run_process

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = REPO / ".venv" / "bin"
PYTHON = VENV_BIN / "python"
RUN_TIMEOUT = 120.0
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)
# What a developer's shell may carry that would let the checkout into the fresh folder.
LEAKY = ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "VIRTUAL_ENV", "HOST", "PORT")
EMBEDDING_API = (
    "running",
    "LanewayQuery",
    "LanewayMutation",
    "LanewaySubscription",
    "laneway_context",
    "LanewayContext",
)


@dataclass(frozen=True, slots=True)
class Block:
    language: str
    text: str

    @property
    def name(self) -> str | None:
        """The file a python/toml block is: its first line `# NAME`."""
        first = self.text.splitlines()[0] if self.text else ""
        found = re.fullmatch(r"# ([\w.-]+\.(?:py|toml))", first)
        return found.group(1) if found else None


def readme_blocks() -> list[Block]:
    return [Block(m.group(1), m.group(2)) for m in FENCE.finditer((REPO / "README.md").read_text())]


def files() -> dict[str, str]:
    """The python and toml blocks by the file they are."""
    named = [b for b in readme_blocks() if b.language in ("python", "toml")]
    assert all(b.name for b in named), [b.text[:60] for b in named if not b.name]
    assert len({b.name for b in named}) == len(named), "two README blocks are the same file"
    return {str(b.name): b.text for b in named}


def shell_block(key: str) -> Block:
    (block,) = [b for b in readme_blocks() if b.language == "sh" and key in b.text]
    return block


# Each shell block is claimed by the one check whose key it contains.
SHELL_CHECKS = {
    "make run": "test_make_block_names_the_makefile_targets",
    "curl -s": "test_curl_block_against_the_service",
    "pip wheel --no-deps": "test_install_block_is_what_the_wheel_test_does",
    "laneway worker": "test_worker_blocks_run_an_instance",
    "laneway enqueue": "test_worker_blocks_run_an_instance",
    "laneway serve": "test_serve_block_serves_the_workflows",
    "python -m pytest": "test_testing_example_passes",
}


def test_every_block_is_checked() -> None:
    blocks = readme_blocks()
    assert {b.language for b in blocks} <= {"python", "toml", "sh", "text", "dockerfile"}
    files()  # every python and toml block is a named file
    for block in (b for b in blocks if b.language == "sh"):
        claims = [key for key in SHELL_CHECKS if key in block.text]
        assert len(claims) == 1, f"shell block claimed by {claims}: {block.text!r}"
    for key in SHELL_CHECKS:
        shell_block(key)  # each check has its block
    assert [b.language for b in blocks].count("text") == 1  # main.py's output


# -- the fresh folder ----------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A folder outside the repository holding every file the README defines."""
    folder = tmp_path / "project"
    assert not folder.resolve().is_relative_to(REPO)
    folder.mkdir()
    for name, text in files().items():
        (folder / name).write_text(text)
    return folder


def user_environment(database_url: str | None, **extra: str) -> dict[str, str]:
    """A user's shell with the venv activated: its bin first on PATH, nothing of ours."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in LEAKY and not k.startswith(("LANEWAY_", "DATABASE_", "PYTEST_"))
    }
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    if database_url is not None:
        env["DATABASE_URL"] = database_url
    env.update(extra)
    return env


async def run(
    argv: list[str], *, cwd: Path, env: Mapping[str, str], timeout: float = RUN_TIMEOUT
) -> tuple[int, str, str]:
    return await run_process(argv, cwd=cwd, env=env, timeout=timeout)


@contextlib.asynccontextmanager
async def background(
    argv: list[str], *, cwd: Path, env: Mapping[str, str], log: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    """A long-running command; SIGTERM on the way out, which must end it cleanly (exit 0)."""
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, env=dict(env), stdout=out, stderr=subprocess.STDOUT
        )
        try:
            yield process
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
                try:
                    async with asyncio.timeout(30):
                        await process.wait()
                except TimeoutError:
                    process.kill()
                    await process.wait()
    output = log.read_text()  # noqa: ASYNC240 - the process is gone
    assert process.returncode == 0, output


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def answers(url: str) -> bool:
    async with httpx.AsyncClient(timeout=2) as client:
        try:
            return (await client.get(url)).status_code == 200
        except httpx.TransportError:
            return False


def readme_command(line: str, **replace: str) -> list[str]:
    """One command line of a shell block, `python` meaning the venv's (as when activated)."""
    argv = [replace.get(word, word) for word in shlex.split(line, comments=True)]
    return [str(PYTHON), *argv[1:]] if argv[0] == "python" else argv


def commands_of(block: Block) -> list[str]:
    return [line for line in block.text.splitlines() if shlex.split(line, comments=True)]


def apply_export(line: str, env: dict[str, str], database_url: str) -> bool:
    """Apply an `export A=B ...` line to `env` (DATABASE_URL: the test's); False if not one."""
    words = shlex.split(line, comments=True)
    if words[0] != "export":
        return False
    for assignment in words[1:]:
        name, _, value = assignment.partition("=")
        env[name] = database_url if name == "DATABASE_URL" else value
    return True


# -- the python blocks ---------------------------------------------------------------------------


async def test_modules_start_nothing_when_imported(project: Path) -> None:
    # An unreachable DATABASE_URL: any connection attempt at import would fail the import,
    # and without it an embedded server would leave .laneway/ in the folder.
    modules = [name.removesuffix(".py") for name in files() if name.endswith(".py")]
    embedding = {"host", "mounted"}
    if not embedding_api_available():
        modules = [m for m in modules if m not in embedding]
    code = f"import {', '.join(modules)}"
    env = user_environment("postgresql://postgres@127.0.0.1:9/none")
    returncode, _, err = await run([str(PYTHON), "-c", code], cwd=project, env=env, timeout=30)
    assert returncode == 0, err
    assert not (project / ".laneway").exists()


async def test_python_blocks_pass_strict_typing(project: Path, tmp_path: Path) -> None:
    # A user who copies the examples into a project checked with `mypy --strict` gets no
    # error. MYPYPATH: laneway's source, as an installed wheel would show it (mypy does not
    # follow the import hook of an editable install).
    modules = sorted(name for name in files() if name.endswith(".py"))
    argv = [str(PYTHON), "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "mypy")]
    env = user_environment(None, MYPYPATH=str(REPO))
    code, out, err = await run([*argv, *modules], cwd=project, env=env)
    assert code == 0, out + err


async def test_main_prints_what_the_readme_says(project: Path, database_url: str) -> None:
    (expected,) = [b.text for b in readme_blocks() if b.language == "text"]
    code, out, err = await run(
        [str(PYTHON), "main.py"], cwd=project, env=user_environment(database_url)
    )
    assert code == 0, err
    assert out == expected
    # The README says the engine's own lines go to standard error, out of the printed output.
    assert "instance failed" in err


async def test_logging_setup_prints_the_fields_of_laneway_records(project: Path) -> None:
    code = (
        "import logging, logging_setup\n"
        "logging.getLogger('laneway.engine.runner').error('instance failed', extra={"
        "'instance_id': '0192-abc', 'error': \"KeyError: 'customer_id'\"})"
    )
    env = user_environment("postgresql://postgres@127.0.0.1:9/none")
    returncode, _, err = await run([str(PYTHON), "-c", code], cwd=project, env=env, timeout=30)
    assert returncode == 0, err
    assert "laneway.engine.runner: instance failed" in err
    assert "instance_id=0192-abc error=\"KeyError: 'customer_id'\"" in err  # quoted: spaces


async def test_pipeline_prints_its_result(project: Path, database_url: str) -> None:
    code, out, err = await run(
        [str(PYTHON), "pipeline.py"], cwd=project, env=user_environment(database_url)
    )
    assert code == 0, err
    assert out == "completed 6\n"


async def test_utilities_print_their_results(project: Path, database_url: str) -> None:
    code, out, err = await run(
        [str(PYTHON), "utilities.py"], cwd=project, env=user_environment(database_url)
    )
    assert code == 0, err
    assert out.splitlines() == ["{'rate': 1.08, 'tries': 3}", "failed 3 card declined"]
    # And on standard error, as the README says: a WARNING per failed attempt, an ERROR at the end.
    assert err.count("operation attempt failed") == 3, err
    assert err.count("instance failed") == 1, err


async def test_waits_print_their_results(project: Path, database_url: str) -> None:
    code, out, err = await run(
        [str(PYTHON), "waits.py"], cwd=project, env=user_environment(database_url)
    )
    assert code == 0, err
    assert out.splitlines() == [
        "{'reminded': 'ada@example.com'}",
        "{'amount': 42, 'shipped': True}",
        "{'shipped': False}",
        "paused decide",
        "$.decision",
        "{'note': 'ship it', 'published': True}",
    ]


async def test_deploys_run_each_version_on_its_own_code(project: Path, database_url: str) -> None:
    code, out, err = await run(
        [str(PYTHON), "deploys.py"], cwd=project, env=user_environment(database_url)
    )
    assert code == 0, err
    assert out.splitlines() == [
        "VERSION_GONE ship 1 1",
        "{'by': 'v1', 'sent': 'p-1'}",
        "{'by': 'v2', 'sent': 'p-2', 'tracked': True}",
        "[]",
    ]


async def test_testing_example_passes(project: Path, server_url: str) -> None:
    (line,) = commands_of(shell_block("python -m pytest"))
    # Warnings as errors, as a project run with `-W error` has them: a warning on import (as
    # Starlette's TestClient gives with the httpx pinned) would fail its collection.
    env = user_environment(None, LANEWAY_TEST_DATABASE_URL=server_url, PYTHONWARNINGS="error")
    code, out, err = await run(readme_command(line), cwd=project, env=env)
    assert code == 0, out + err
    assert re.search(r"\b4 passed\b", out), out
    assert "warning" not in out.lower(), out


def embedding_api_available() -> bool:
    import laneway.api

    return all(hasattr(laneway.api, name) for name in EMBEDDING_API)


EMBEDDED_CHECK = """
import sys
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect
import {module}

# TestClient's own "testserver" is no loopback name: without tokens the host allow-list
# refuses it (docs/limits.md).
with TestClient({module}.app, base_url="http://localhost") as client:
    for path, query in {requests!r}:
        response = client.post(path, json={{"query": query}})
        print(response.status_code, response.text)
        assert response.status_code == 200 and "errors" not in response.json(), response.text
    {extra}
    # A relative websocket URL would be ws://testserver whatever base_url says: absolute it is.
    socket_url = "ws://localhost" + {requests!r}[0][0]
    with client.websocket_connect(socket_url, subprotocols=["graphql-transport-ws"]) as ws:
        ws.send_json({{"type": "connection_init", "payload": {{}}}})
        assert ws.receive_json()["type"] == "connection_ack"
    # The legacy graphql-ws protocol is refused (4406), on a host's own schema too.
    with client.websocket_connect(socket_url, subprotocols=["graphql-ws"]) as ws:
        ws.send_json({{"type": "connection_init", "payload": {{}}}})
        try:
            answer = ws.receive_json()
        except WebSocketDisconnect as closed:
            assert closed.code == 4406, closed.code
        else:
            raise AssertionError(f"graphql-ws was accepted: {{answer}}")
"""


@pytest.mark.parametrize(
    ("module", "requests", "extra"),
    [
        (
            "mounted",
            [("/laneway/graphql", "{ workflows { name } }")],
            'assert client.get("/").text == "my app"; '
            'assert client.get("/laneway/healthz").status_code == 200',
        ),
        (
            "host",
            [("/graphql", "{ whoami workflows { name } }")],
            'assert "guest" in response.text; '
            'oversized = {"query": "{ whoami }", "padding": "x" * 1_100_000}; '
            'assert client.post("/graphql", json=oversized).status_code == 413; '
            'assert response.headers["x-request-id"]',
        ),
    ],
)
async def test_embedding_blocks_serve_laneway(
    project: Path, database_url: str, module: str, requests: list[tuple[str, str]], extra: str
) -> None:
    if not embedding_api_available():
        pytest.skip(f"laneway.api does not offer {', '.join(EMBEDDING_API)} yet")
    check = EMBEDDED_CHECK.format(module=module, requests=requests, extra=extra)
    code, out, err = await run(
        [str(PYTHON), "-c", check], cwd=project, env=user_environment(database_url)
    )
    assert code == 0, out + err
    assert '"ingest"' in out, out
    assert '"letter"' in out, out


# -- the shell blocks ----------------------------------------------------------------------------


async def test_worker_blocks_run_an_instance(
    project: Path, database_url: str, tmp_path: Path
) -> None:
    env = user_environment(None, LANEWAY_POLL_SECONDS="0.2")
    worker: list[str] | None = None
    for line in commands_of(shell_block("laneway worker")):
        if apply_export(line, env, database_url):
            continue
        argv = readme_command(line)
        if argv[:2] == ["laneway", "worker"]:
            worker = argv
            continue
        code, out, err = await run(argv, cwd=project, env=env)
        assert code == 0, err
        report = json.loads(out)  # laneway migrate's: the test database is migrated already
        assert (report["applied"], bool(report["version"])) == ([], True), report
    assert worker is not None, "the block starts no worker"
    enqueue, status = commands_of(shell_block("laneway enqueue"))

    async with background(worker, cwd=project, env=env, log=tmp_path / "worker.log"):
        code, out, err = await run(readme_command(enqueue), cwd=project, env=env)
        assert code == 0, err
        instance_id = json.loads(out)["instanceID"]

        async def probe() -> dict[str, object]:
            argv = readme_command(status, INSTANCE_ID=instance_id)
            code, out, err = await run(argv, cwd=project, env=env)
            assert code == 0, err
            shown: dict[str, object] = json.loads(out)
            return shown

        shown = await eventually(probe, lambda s: s["status"] not in ("pending", "running"), 60)
    assert (shown["status"], shown["result"]) == ("completed", {"words": 6})


async def test_serve_block_serves_the_workflows(
    project: Path, database_url: str, tmp_path: Path
) -> None:
    (line,) = commands_of(shell_block("laneway serve"))
    port = str(free_port())
    argv = readme_command(line, **{"8000": port})
    env = user_environment(database_url, LANEWAY_WORKFLOWS="workflows")
    async with background(argv, cwd=project, env=env, log=tmp_path / "serve.log"):
        base = f"http://127.0.0.1:{port}"
        await eventually(lambda: answers(f"{base}/healthz"), bool, 60)
        async with httpx.AsyncClient(timeout=10) as client:
            response = await client.post(
                f"{base}/graphql", json={"query": "{ workflows { name } }"}
            )
    names = {w["name"] for w in response.json()["data"]["workflows"]}
    assert names == {"ingest", "letter"}


async def test_curl_block_against_the_service(database_url: str, tmp_path: Path) -> None:
    port = str(free_port())
    env = user_environment(database_url)
    service = [str(PYTHON), "-m", "app", "--host", "127.0.0.1", "--port", port]  # `make run`
    async with background(service, cwd=REPO, env=env, log=tmp_path / "service.log"):
        await eventually(lambda: answers(f"http://127.0.0.1:{port}/healthz"), bool, 60)
        script = shell_block("curl -s").text.replace("127.0.0.1:8000", f"127.0.0.1:{port}")

        async def curl() -> list[dict[str, object]]:
            code, out, err = await run(["bash", "-c", script], cwd=tmp_path, env=env)
            assert code == 0, err
            return [json.loads(line) for line in out.replace("}{", "}\n{").splitlines()]

        enqueued, _ = await curl()
        assert json.dumps(enqueued).endswith('"created": true}}}'), enqueued
        _, listed = await eventually(curl, lambda r: '"Hello, Ada!"' in json.dumps(r[1]), 30)
    assert "COMPLETED" in json.dumps(listed).upper(), listed


def test_make_block_names_the_makefile_targets() -> None:
    makefile = (REPO / "Makefile").read_text()
    targets: dict[str, str] = dict(
        re.findall(r"^([a-z-]+):.*\n\t(.*)", makefile, flags=re.MULTILINE)
    )
    lines = [shlex.split(line, comments=True) for line in commands_of(shell_block("make run"))]
    assert lines == [["make", "run"], ["make", "test"]]
    assert "-m app" in targets["run"]  # the service the curl block is checked against
    assert "-m pytest" in targets["test"]


def test_install_block_is_what_the_wheel_test_does() -> None:
    build, install_wheel, install_checkout = (
        shlex.split(line, comments=True) for line in commands_of(shell_block("pip wheel --no-deps"))
    )
    assert build == ["python", "-m", "pip", "wheel", "--no-deps", "-w", "dist", "."]
    wheel_test = (REPO / "tests" / "test_wheel.py").read_text()
    assert '"-m", "pip", "wheel", "--no-deps"' in wheel_test
    assert '"pip", "install"' in wheel_test
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert install_wheel[:2] == ["pip", "install"]
    assert install_wheel[2].endswith(f"/dist/laneway-{version}-py3-none-any.whl")
    assert install_checkout == ["pip", "install", "path/to/laneway"]


def test_dockerfile_block_builds_on_the_image() -> None:
    (block,) = [b for b in readme_blocks() if b.language == "dockerfile"]
    image = (REPO / "Dockerfile").read_text()
    lines = [line.split() for line in block.text.splitlines() if line.strip()]
    assert lines[0] == ["FROM", "laneway:local"]
    assert "docker build -t laneway:local ." in (REPO / "README.md").read_text()
    for words in lines[1:]:
        if words[0] == "COPY":
            chown = [w.removeprefix("--chown=") for w in words if w.startswith("--chown=")]
            assert all(re.search(rf"useradd [^\n]* {user} ", image) for user in chown), chown
            assert words[-1].startswith("/srv/laneway/")
            assert (Path(words[-2]).name) in files()  # a file the README defines
    assert "PYTHONPATH=/srv/laneway" in image
    assert 'ENTRYPOINT ["laneway"]' in image
