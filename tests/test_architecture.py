"""The import ladder of STYLE A1: each layer imports only the layers below it.

cli > api > services > engine | events > store > model, errors, config. app/logs.py is for
the CLI alone. Checked with a plain AST walk, which works because imports are absolute.
"""

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[1] / "app"

FORBIDDEN = {
    "store": ("app.engine", "app.events", "app.api", "app.services", "app.cli", "app.logs"),
    "engine": (
        "app.events",
        "app.api",
        "app.services",
        "app.cli",
        "app.logs",
        "strawberry",
        "starlette",
        "uvicorn",
    ),
    "events": (
        "app.engine",
        "app.api",
        "app.services",
        "app.cli",
        "app.logs",
        "strawberry",
        "starlette",
        "uvicorn",
    ),
    "services": ("app.api", "app.cli", "app.logs", "strawberry", "starlette", "uvicorn"),
    "api": ("app.cli", "app.logs"),
    "model": ("app",),
    "errors": ("app", "strawberry", "starlette", "graphql"),
    "config": ("app.model", "app.store", "app.engine", "app.events", "app.api", "app.services"),
}


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def modules_of(package: str) -> list[Path]:
    single = APP / f"{package}.py"
    return [single] if single.exists() else sorted((APP / package).rglob("*.py"))


def is_forbidden(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_only_lower_layers(package: str) -> None:
    paths = modules_of(package)
    assert paths, f"no modules found for {package}"
    for path in paths:
        bad = {n for n in imports_of(path) if is_forbidden(n, FORBIDDEN[package])}
        assert not bad, f"{path.relative_to(APP.parent)} imports {sorted(bad)}"


def test_is_forbidden_matches_whole_module_names() -> None:
    assert is_forbidden("app.api.schema", ("app.api",))
    assert is_forbidden("app", ("app",))
    assert not is_forbidden("app.apiary", ("app.api",))


def test_only_the_cli_configures_logging() -> None:
    for path in APP.rglob("*.py"):
        if path.name == "cli.py" and path.parent == APP:
            continue
        assert "app.logs" not in imports_of(path), f"{path} imports app.logs"
        assert "basicConfig" not in path.read_text(), f"{path} configures logging"
