"""docker-compose.yml runs PostgreSQL, one API server and two workers from one image; the
Dockerfile installs the built wheel; .dockerignore keeps environments and bench out.

There is no Docker engine here, so the files are checked as text.

PyYAML is not a dependency, so the file is read with a minimal parser for the block-style
subset it uses (mappings, lists of scalars, quoted and plain scalars).
"""

import fnmatch
import json
import re
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _scalar(text: str) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


def parse_block_yaml(source: str) -> Any:
    """Parse indentation-based YAML: nested mappings and lists of scalars or `k: v` pairs."""
    lines = []
    for raw in source.splitlines():
        stripped = raw.split(" #")[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if stripped.strip():
            lines.append((len(stripped) - len(stripped.lstrip()), stripped.strip()))

    def block(start: int, indent: int) -> tuple[Any, int]:
        if lines[start][1].startswith("- "):
            items: list[Any] = []
            i = start
            while i < len(lines) and lines[i][0] == indent and lines[i][1].startswith("- "):
                items.append(_scalar(lines[i][1][2:]))
                i += 1
            return items, i
        mapping: dict[str, Any] = {}
        i = start
        while i < len(lines) and lines[i][0] == indent:
            key, sep, rest = lines[i][1].partition(":")
            assert sep, f"not a mapping entry: {lines[i][1]!r}"
            i += 1
            if rest.strip():
                mapping[_scalar(key)] = _scalar(rest)
            elif i < len(lines) and lines[i][0] > indent:
                mapping[_scalar(key)], i = block(i, lines[i][0])
            else:
                mapping[_scalar(key)] = None
        return mapping, i

    parsed, end = block(0, lines[0][0])
    assert end == len(lines), f"unparsed line: {lines[end][1]!r}"
    return parsed


def test_parser_reads_nested_blocks() -> None:
    parsed = parse_block_yaml('a:\n  b: "1"\n  c:\n    - x\n    - y\nd: e  # note\n')
    assert parsed == {"a": {"b": "1", "c": ["x", "y"]}, "d": "e"}


def test_compose_runs_postgres_one_api_and_two_workers() -> None:
    compose = parse_block_yaml((ROOT / "docker-compose.yml").read_text())
    services: dict[str, Any] = compose["services"]
    assert "postgres" in services
    api = services.get("serve") or services["api"]
    assert "serve" in str(api["command"])
    workers = [s for s in services.values() if "worker" in str(s.get("command", ""))]
    assert len(workers) == 2
    for service in [api, *workers]:
        env = service["environment"]
        assert "@postgres:5432/" in env["DATABASE_URL"]
        assert env["LANEWAY_WORKFLOWS"] == "app.examples"
    assert api["environment"].get("LANEWAY_ALLOW_INSECURE") == "1" or api["environment"].get(
        "LANEWAY_API_TOKENS"
    )
    assert (ROOT / "Dockerfile").exists()


# -- the image -----------------------------------------------------------------------------------

Instruction = tuple[str, str]  # (KEYWORD, its arguments), continuation lines joined


def dockerfile_stages(source: str) -> list[list[Instruction]]:
    """The Dockerfile's instructions grouped by stage, each stage starting with its FROM."""
    instructions: list[Instruction] = []
    pending = ""
    for raw in source.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue  # comments may sit between continuation lines too
        pending = f"{pending} {line}".strip()
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        keyword, _, arguments = pending.partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
        pending = ""
    assert not pending, f"unterminated instruction: {pending!r}"
    stages: list[list[Instruction]] = []
    for keyword, arguments in instructions:
        if keyword == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((keyword, arguments))
    return stages


def _arguments(stage: list[Instruction], keyword: str) -> list[str]:
    return [arguments for key, arguments in stage if key == keyword]


def _stage_name(stage: list[Instruction]) -> str | None:
    words = stage[0][1].split()
    return words[2] if len(words) == 3 and words[1].lower() == "as" else None


def _pip_installs(stage: list[Instruction]) -> list[list[str]]:
    """The arguments of every `pip install` in the stage's RUN instructions."""
    found = []
    for run in _arguments(stage, "RUN"):
        for command in re.split(r"&&|;|\|\|", run):
            words = command.split()
            for i in range(len(words) - 1):
                if words[i].endswith("pip") and words[i + 1] == "install":
                    found.append(words[i + 2 :])
    return found


def test_dockerfile_reader_joins_continuations_and_groups_stages() -> None:
    stages = dockerfile_stages(
        'ARG X=1\nFROM a AS b\nRUN one \\\n    # note\n    && two\nFROM c\nCMD ["x"]\n'
    )
    assert stages == [
        [("FROM", "a AS b"), ("RUN", "one && two")],
        [("FROM", "c"), ("CMD", '["x"]')],
    ]
    assert _pip_installs([("RUN", "pip install -q a.whl && rm x")]) == [["-q", "a.whl"]]


def test_dockerfile_builds_the_wheel_and_the_image_installs_only_that_wheel() -> None:
    stages = dockerfile_stages((ROOT / "Dockerfile").read_text())
    assert len(stages) >= 2, "a build stage makes the wheel, the final stage installs it"
    build, final = stages[0], stages[-1]
    build_name = _stage_name(build)
    assert build_name
    assert any("pip wheel" in run and "--no-deps" in run for run in _arguments(build, "RUN"))
    for stage in stages:
        for install in _pip_installs(stage):
            assert not {"-e", "--editable"} & set(install), install
            assert "." not in install, "the source tree is never installed, only the wheel"
    installs = _pip_installs(final)
    # The wheel with its `pinned` extra: the dependency versions the release is tested with.
    wheels = [arg for install in installs for arg in install if ".whl" in arg]
    assert wheels, installs
    assert all(arg.rstrip('"').endswith(".whl)[pinned]") for arg in wheels), wheels
    copies = _arguments(final, "COPY")
    assert any(copy.startswith(f"--from={build_name} ") for copy in copies), copies
    # The final stage gets no source: the wheel from the build stage, and app/ only.
    sources = [c.split()[:-1] for c in copies if not c.startswith("--from=")]
    assert sources == [["app"]], sources
    app_dest = PurePosixPath(_arguments(final, "WORKDIR")[-1]) / copies[-1].split()[-1]
    env = dict(
        word.partition("=")[::2] for line in _arguments(final, "ENV") for word in line.split()
    )
    # The console script does not import from the working directory; PYTHONPATH must name
    # the folder holding app/ for LANEWAY_WORKFLOWS=app.examples.
    assert str(app_dest.parent) in env["PYTHONPATH"].split(":")
    users = _arguments(final, "USER")
    assert users, "the image runs as a user of its own, not root"
    assert users[-1] not in {"root", "0"}
    # By number: Kubernetes' runAsNonRoot refuses to start an image whose USER is a name.
    assert users[-1].isdigit(), users
    assert json.loads(_arguments(final, "ENTRYPOINT")[-1]) == ["laneway"]
    # serve listens on the environment's HOST and PORT, so `docker run -e PORT=…` moves it
    # (flags in CMD would win over them).
    assert json.loads(_arguments(final, "CMD")[-1]) == ["serve"]
    assert (env["HOST"], env["PORT"]) == ("0.0.0.0", "8000")


def _ignored(path: str, patterns: list[str]) -> bool:
    parts = PurePosixPath(path).parts
    for pattern in patterns:
        if pattern.startswith("**/"):
            if any(fnmatch.fnmatch(part, pattern[3:]) for part in parts):
                return True
        elif any(fnmatch.fnmatch("/".join(parts[: i + 1]), pattern) for i in range(len(parts))):
            return True
    return False


def test_dockerignore_keeps_environments_data_and_bench_out_but_not_the_build_inputs() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert not any(p.startswith("!") for p in patterns)
    for path in (".venv", "bench/.venv", ".laneway", "bench", "bench/compare.py"):
        assert _ignored(path, patterns), path
    stages = dockerfile_stages((ROOT / "Dockerfile").read_text())
    inputs = [
        source
        for stage in stages
        for copy in _arguments(stage, "COPY")
        if not copy.startswith("--from=")
        for source in copy.split()[:-1]
    ]
    assert {"pyproject.toml", "laneway", "migrations", "app"} <= set(inputs)
    for source in inputs:
        assert not _ignored(source, patterns), source
    assert not _ignored("laneway/api/static/dashboard.html", patterns)


def test_compose_serves_and_works_from_one_image() -> None:
    services: dict[str, Any] = parse_block_yaml((ROOT / "docker-compose.yml").read_text())[
        "services"
    ]
    laneway = {name: s for name, s in services.items() if name != "postgres"}
    assert {s["build"] for s in laneway.values()} == {"."}
    assert len({s.get("image") for s in laneway.values()}) == 1


def test_compose_keeps_an_open_api_off_the_network_and_stops_workers_within_their_grace() -> None:
    # An outside audit: "8000:8000" published the tokenless demo API on every interface (a LAN
    # client setting its own Host enqueued), and the workers' 30 s stop window ran a grace of 8.
    services: dict[str, Any] = parse_block_yaml((ROOT / "docker-compose.yml").read_text())[
        "services"
    ]
    for name, service in services.items():
        if service.get("environment", {}).get("LANEWAY_ALLOW_INSECURE") == "1":
            for published in service.get("ports", []):
                assert published.startswith("127.0.0.1:"), (name, published)
        if "stop_grace_period" in service:
            window = float(service["stop_grace_period"].removesuffix("s"))
            grace = float(service["environment"]["LANEWAY_SHUTDOWN_GRACE"])
            assert 0 < window - grace <= 10, (name, window, grace)
        if name != "postgres":
            assert service.get("restart") == "unless-stopped", name


def _image_pythonpath() -> list[str]:
    final = dockerfile_stages((ROOT / "Dockerfile").read_text())[-1]
    env = dict(w.partition("=")[::2] for line in _arguments(final, "ENV") for w in line.split())
    return [p.rstrip("/") for p in env["PYTHONPATH"].split(":")]


@pytest.mark.parametrize("document", ["README.md", "docs/deploying.md"])
def test_documented_images_of_your_own_import_the_modules_they_name(document: str) -> None:
    text = (ROOT / document).read_text()
    blocks = re.findall(r"```dockerfile\n(.*?)```", text, flags=re.DOTALL)
    assert blocks, f"{document} shows how to add workflow modules to the image"
    compose = parse_block_yaml((ROOT / "docker-compose.yml").read_text())
    image = compose["services"]["serve"]["image"]
    pythonpath = _image_pythonpath()
    for block in blocks:
        (stage,) = dockerfile_stages(block)
        assert stage[0] == ("FROM", image), block
        provided = {"app"}  # the image's own app/
        for copy in _arguments(stage, "COPY"):
            *sources, dest = [w for w in copy.split() if not w.startswith("--")]
            folder = PurePosixPath(dest)
            if str(folder.parent) in pythonpath and dest.endswith("/") and len(sources) == 1:
                provided.add(folder.name)  # a package copied in as a folder of that name
            if str(folder) in pythonpath:
                provided.update(PurePosixPath(s).stem for s in sources)  # modules copied in
        installs = _pip_installs(stage)
        if installs:
            users = _arguments(stage, "USER")
            assert users[0] == "root", "pip installs into the image's site-packages as root"
            assert users[-1] == "laneway", "and the image runs as laneway again"
        env = dict(w.partition("=")[::2] for line in _arguments(stage, "ENV") for w in line.split())
        for module in env["LANEWAY_WORKFLOWS"].split(","):
            top = module.split(".")[0]
            assert top in provided or installs, f"{module} is neither copied nor installed"
