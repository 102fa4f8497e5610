"""The wheel as a user gets it: built from the source, installed (not editable) in a fresh venv.

The wheel is built from a clean copy of the source tree (setuptools reuses a stale build/ in
the tree, so a file deleted from laneway/ would otherwise still ship). The venv lives outside
the repository, and its scripts run from a project folder with an `app/` package of its own, so
nothing can come from the checkout: the library, its migrations and its console script must
all come from the wheel.
"""

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import uuid
import zipfile
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg
import pytest

import laneway
from laneway.store.databases import create_database, drop_database
from tests.chaos.supervisor import stop_worker
from tests.engine.helpers import eventually
from tests.processes import run_process

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
VERSION: str = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
SHIPPED_MIGRATIONS = sorted(
    p.stem for p in (ROOT / "migrations").glob("*.sql") if re.fullmatch(r"[0-9]{4}_\w+", p.stem)
)
BUILD_TIMEOUT = 300.0  # a first build fetches setuptools; later ones find it in pip's cache
INSTALL_TIMEOUT = 600.0  # likewise the dependencies
RUN_TIMEOUT = 120.0
# Never part of a source tree a wheel is built from: environments, caches, build leftovers.
NOT_SOURCE = shutil.ignore_patterns(
    ".git",
    ".venv",
    ".laneway",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".hypothesis",
)
# What a developer's shell may carry that would let the repository leak into the venv.
LEAKY_VARIABLES = ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "PYTHONSTARTUP", "VIRTUAL_ENV")

# The user's own project: an `app` package (the same name as Laneway's service, which the
# wheel must not carry) with a workflow module, and a script that drives the library.
USER_APP_INIT = '''"""The user's application (not Laneway's app/)."""

OWNER = "the user's project"
'''
USER_APP_JOBS = '''"""The user's workflows, registered through LANEWAY_WORKFLOWS=app.jobs."""

from laneway import Done, HandlerContext, Next, Workflow


async def split(ctx: HandlerContext, params: dict) -> Next:
    ctx.state["words"] = str(params["text"]).split()
    return Next("count", {"from": "split"})


async def count(ctx: HandlerContext, params: dict) -> Done:
    words = ctx.state["words"]
    return Done({"count": len(words), "first": words[0], "params": params})


tally = Workflow("tally", handlers={"split": split, "count": count}, initial="split")
'''
USER_SCRIPT = '''"""Migrate an empty database, run a workflow of app.jobs, print the outcome."""

import asyncio
import json
import os
import sys
import sysconfig
from importlib import metadata, resources

import app
import laneway
from laneway import Settings, open_services
from laneway.store.migrate import migrate


async def main() -> None:
    report = await migrate(os.environ["DATABASE_URL"])
    settings = Settings.from_env(os.environ)
    async with open_services(settings) as services:
        engine = services.engine
        async with engine.running():
            enqueued = await engine.enqueue("tally", {"text": "durable workflows on postgres"})
            instance = await engine.wait(enqueued.instance_id, timeout=60)
    distribution = metadata.distribution("laneway")
    print(json.dumps({
        "laneway_file": laneway.__file__,
        "migrations_folder": str(resources.files("laneway.migrations")),
        "purelib": sysconfig.get_paths()["purelib"],
        "sys_path": sys.path,
        "direct_url": json.loads(distribution.read_text("direct_url.json") or "{}"),
        "version": laneway.__version__,
        "metadata_version": metadata.version("laneway"),
        "app_file": app.__file__,
        "app_owner": app.OWNER,
        "applied": report.applied,
        "schema_version": report.version,
        "workflows": engine.registry.names(),
        "status": str(instance.status),
        "result": instance.result,
    }))


asyncio.run(main())
'''


def _bin(venv: Path, name: str) -> Path:
    return venv / ("Scripts" if os.name == "nt" else "bin") / name


def _environment(**extra: str) -> dict[str, str]:
    """This process's environment without Laneway's settings or anything pointing at the repo."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LANEWAY_", "DATABASE_")) and k not in LEAKY_VARIABLES
    }
    env.update(extra)
    return env


def _run(
    command: Sequence[str | Path],
    *,
    cwd: Path,
    timeout: float,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run to completion; fail the test with the command's output if it exits non-zero."""
    done = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=dict(env) if env is not None else _environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, (
        f"{command} exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    )
    return done


def _outside_repository(path: Path) -> Path:
    assert not path.resolve().is_relative_to(ROOT), f"{path} is inside the repository"
    return path


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `pip wheel --no-deps` builds from (a clean copy of) the repository."""
    source = _outside_repository(tmp_path_factory.mktemp("source") / "laneway")
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE, symlinks=True)
    dist = tmp_path_factory.mktemp("dist")
    done = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", dist, "."],
        cwd=source,
        timeout=BUILD_TIMEOUT,
    )
    # setuptools builds quietly when pyproject.toml lists every folder it ships, data
    # folders included; a newcomer's first `make run` should not print its warnings.
    assert "would be ignored" not in done.stdout + done.stderr, done.stdout + done.stderr
    built = sorted(dist.glob("*.whl"))
    assert [p.name for p in built] == [f"laneway-{VERSION}-py3-none-any.whl"]
    return built[0]


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A fresh venv outside the repository with the wheel (and its dependencies, at the
    versions the release is tested with: its `pinned` extra) installed."""
    folder = _outside_repository(tmp_path_factory.mktemp("venv") / "env")
    _run([sys.executable, "-m", "venv", folder], cwd=folder.parent, timeout=RUN_TIMEOUT)
    python = _bin(folder, "python")
    pinned = f"{wheel}[pinned]"
    _run([python, "-m", "pip", "install", "--quiet", pinned], cwd=folder, timeout=INSTALL_TIMEOUT)
    return folder


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's project folder, outside the repository, with its own `app` package."""
    folder = _outside_repository(tmp_path / "project")
    (folder / "app").mkdir(parents=True)
    (folder / "app" / "__init__.py").write_text(USER_APP_INIT)
    (folder / "app" / "jobs.py").write_text(USER_APP_JOBS)
    (folder / "run_tally.py").write_text(USER_SCRIPT)
    return folder


@pytest.fixture
def empty_database(server_url: str) -> Iterator[str]:
    """A database with nothing in it: no laneway schema, no migrations table."""
    name = f"w_{uuid.uuid4().hex[:12]}"
    url = asyncio.run(create_database(server_url, name))
    try:
        yield url
    finally:
        asyncio.run(drop_database(server_url, name))


def test_version_is_the_installed_metadata_version() -> None:
    assert laneway.__version__ == metadata.version("laneway") == VERSION


def test_wheel_holds_the_library_with_its_sql_dashboard_and_types_and_nothing_else(
    wheel: Path,
) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        dist_info = f"laneway-{VERSION}.dist-info"
        entry_points = archive.read(f"{dist_info}/entry_points.txt").decode()
        wheel_metadata = archive.read(f"{dist_info}/METADATA").decode()
    # laneway_entry.py: the console script's entry point, outside the package (its docstring).
    assert {name.split("/")[0] for name in names} == {"laneway", "laneway_entry.py", dist_info}
    shipped_sql = sorted(
        name.removeprefix("laneway/migrations/").removesuffix(".sql")
        for name in names
        if name.startswith("laneway/migrations/") and name.endswith(".sql")
    )
    assert shipped_sql == SHIPPED_MIGRATIONS
    assert len(SHIPPED_MIGRATIONS) >= 10
    assert "laneway/migrations/__init__.py" in names
    assert "laneway/py.typed" in names
    assert "laneway/api/static/dashboard.html" in names
    static = {
        f"laneway/{p.relative_to(ROOT / 'laneway').as_posix()}"
        for p in (ROOT / "laneway" / "api" / "static").iterdir()
        if p.is_file()
    }
    assert static <= names
    # Every file of the source package is in the wheel (the package list and package data in
    # pyproject.toml are kept by hand), and the wheel has no file the source does not.
    source_files = {
        f"laneway/{p.relative_to(ROOT / 'laneway').as_posix()}"
        for p in (ROOT / "laneway").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }
    packaged = {
        n for n in names if n.startswith("laneway/") and not n.startswith("laneway/migrations/")
    }
    assert packaged == source_files
    assert re.search(r"^laneway\s*=\s*laneway_entry:main$", entry_points, flags=re.MULTILINE)
    assert f"\nVersion: {VERSION}\n" in wheel_metadata


def test_installed_wheel_migrates_an_empty_database_and_runs_a_workflow_of_the_users_app(
    venv: Path, project: Path, empty_database: str
) -> None:
    done = _run(
        [_bin(venv, "python"), "run_tally.py"],
        cwd=project,
        timeout=RUN_TIMEOUT,
        env=_environment(
            DATABASE_URL=empty_database,
            LANEWAY_WORKFLOWS="app.jobs",
            LANEWAY_DATA_DIR=str(project / ".laneway"),
        ),
    )
    report: dict[str, Any] = json.loads(done.stdout)
    purelib = Path(report["purelib"]).resolve()
    # The library, its SQL and its metadata are the venv's, installed from the wheel file.
    assert purelib.is_relative_to(venv.resolve())
    assert Path(report["laneway_file"]).resolve() == purelib / "laneway" / "__init__.py"
    assert Path(report["migrations_folder"]).resolve() == purelib / "laneway" / "migrations"
    assert "archive_info" in report["direct_url"], report["direct_url"]  # not editable
    assert report["direct_url"].get("dir_info", {}).get("editable") is not True
    assert not any(Path(p).resolve().is_relative_to(ROOT) for p in report["sys_path"] if p)
    assert report["version"] == report["metadata_version"] == VERSION
    # `app` is the user's package, next to their script.
    assert Path(report["app_file"]).resolve() == (project / "app" / "__init__.py").resolve()
    assert report["app_owner"] == "the user's project"
    # The empty database got every shipped migration; the user's workflow ran to the end.
    assert report["applied"] == SHIPPED_MIGRATIONS
    assert report["schema_version"] == SHIPPED_MIGRATIONS[-1]
    assert report["workflows"] == ["tally"]
    assert report["status"] == "completed"
    assert report["result"] == {"count": 4, "first": "durable", "params": {"from": "split"}}
    assert not (project / ".laneway").exists()  # DATABASE_URL set: no embedded server


# The README's operation_check.py, run with plain python in the venv, which has no pytest.
OPERATION_CHECK = """import asyncio
import importlib.util

from laneway import completed, failed
from laneway.testing import mock_operation_context, run_operation


async def check(ctx):
    rows = ctx.context["rows"]
    return completed({"total": sum(rows)}) if rows else failed("no rows")


async def main() -> None:
    assert importlib.util.find_spec("pytest") is None  # the test is worth nothing with it
    ctx = mock_operation_context(context={"rows": [1, 2, 3]})
    assert await run_operation(check, ctx) == completed({"total": 6})
    empty = mock_operation_context(context={"rows": []})
    assert await run_operation(check, empty) == failed("no rows")
    print("passed")


asyncio.run(main())
"""


def test_installed_wheel_tests_an_operation_in_a_plain_script_without_pytest(
    venv: Path, project: Path
) -> None:
    # Found by an outside audit: laneway.testing imported pytest for its plugin, so this
    # failed with `ModuleNotFoundError: No module named 'pytest'`.
    (project / "operation_check.py").write_text(OPERATION_CHECK)
    done = _run([_bin(venv, "python"), "operation_check.py"], cwd=project, timeout=RUN_TIMEOUT)
    assert done.stdout == "passed\n"


def test_installed_console_script_migrates_an_empty_database(
    venv: Path, project: Path, empty_database: str
) -> None:
    env = _environment(DATABASE_URL=empty_database, LANEWAY_DATA_DIR=str(project / ".laneway"))
    command: list[str | Path] = [_bin(venv, "laneway"), "migrate"]
    first = json.loads(_run(command, cwd=project, timeout=RUN_TIMEOUT, env=env).stdout)
    assert set(first) == {"database", "embedded", "applied", "version"}
    assert first["embedded"] is False
    assert first["database"] == empty_database  # no password here, so nothing redacted
    assert first["applied"] == SHIPPED_MIGRATIONS
    assert first["version"] == SHIPPED_MIGRATIONS[-1]
    again = json.loads(_run(command, cwd=project, timeout=RUN_TIMEOUT, env=env).stdout)
    assert again == {**first, "applied": []}


async def _exec(
    command: Sequence[str | Path], *, cwd: Path, env: Mapping[str, str]
) -> tuple[int, str, str]:
    return await run_process(command, cwd=cwd, env=env, timeout=RUN_TIMEOUT)


def _instance_probe(
    database_url: str, instance_id: UUID, worker: asyncio.subprocess.Process
) -> Callable[[], Awaitable[asyncpg.Record | None]]:
    async def probe() -> asyncpg.Record | None:
        assert worker.returncode is None, f"the worker exited {worker.returncode}"
        conn = await asyncpg.connect(database_url)
        try:
            return await conn.fetchrow(
                "SELECT status, result FROM laneway.instances WHERE instance_id = $1",
                instance_id,
            )
        finally:
            await conn.close()

    return probe


async def test_installed_wheel_runs_the_service_workflows_laid_out_as_the_docker_image(
    venv: Path, tmp_path: Path, database_url: str
) -> None:
    # The image: the wheel installed, only app/ copied next to it, PYTHONPATH naming that
    # folder and LANEWAY_WORKFLOWS=app.examples, as the Dockerfile and docker-compose.yml say.
    image = _outside_repository(tmp_path / "srv" / "laneway")
    shutil.copytree(ROOT / "app", image / "app", ignore=NOT_SOURCE)
    env = _environment(
        DATABASE_URL=database_url,
        PYTHONPATH=str(image),
        LANEWAY_WORKFLOWS="app.examples",
        LANEWAY_POLL_SECONDS="0.1",
        LANEWAY_DATA_DIR=str(image / ".laneway"),
    )
    laneway_script = _bin(venv, "laneway")
    code, out, err = await _exec(
        [laneway_script, "enqueue", "hello", "--params", '{"name": "Ada"}'], cwd=image, env=env
    )
    assert code == 0, err  # an unknown workflow would be refused: app.examples was imported
    enqueued = json.loads(out)
    assert enqueued["created"] is True
    instance_id = UUID(enqueued["instanceID"])
    log = (tmp_path / "worker.log").open("wb")
    try:
        worker = await asyncio.create_subprocess_exec(
            str(laneway_script), "worker", cwd=image, env=env, stdout=log, stderr=log
        )
    finally:
        log.close()
    try:
        row = await eventually(
            _instance_probe(database_url, instance_id, worker),
            lambda r: r is not None and r["status"] == "completed",
            timeout=60,
        )
    finally:
        exit_code = await stop_worker(worker, timeout=15)
    assert row is not None
    assert json.loads(row["result"]) == {"greeting": "Hello, Ada!"}
    assert exit_code == 0, (tmp_path / "worker.log").read_text()
