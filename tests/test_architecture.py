"""The import ladder, enforced here rather than by review: each layer imports only those below.

cli > api > services > engine | events > store > model, errors, config. laneway/logs.py is for
the CLI alone. Checked with a plain AST walk, which works because imports are absolute.
"""

import ast
from pathlib import Path

import pytest

LIBRARY = Path(__file__).resolve().parents[1] / "laneway"

FORBIDDEN = {
    "store": (
        "laneway.engine",
        "laneway.events",
        "laneway.api",
        "laneway.services",
        "laneway.cli",
        "laneway.logs",
    ),
    "engine": (
        "laneway.events",
        "laneway.api",
        "laneway.services",
        "laneway.cli",
        "laneway.logs",
        "strawberry",
        "starlette",
        "uvicorn",
    ),
    "events": (
        "laneway.engine",
        "laneway.api",
        "laneway.services",
        "laneway.cli",
        "laneway.logs",
        "strawberry",
        "starlette",
        "uvicorn",
    ),
    "services": (
        "laneway.api",
        "laneway.cli",
        "laneway.logs",
        "strawberry",
        "starlette",
        "uvicorn",
    ),
    "api": ("laneway.cli", "laneway.logs"),
    "model": ("laneway", "app"),
    "errors": ("laneway", "app", "strawberry", "starlette", "graphql"),
    "config": (
        "laneway.model",
        "laneway.store",
        "laneway.engine",
        "laneway.events",
        "laneway.api",
        "laneway.services",
    ),
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
    single = LIBRARY / f"{package}.py"
    return [single] if single.exists() else sorted((LIBRARY / package).rglob("*.py"))


def is_forbidden(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_only_lower_layers(package: str) -> None:
    paths = modules_of(package)
    assert paths, f"no modules found for {package}"
    for path in paths:
        bad = {n for n in imports_of(path) if is_forbidden(n, FORBIDDEN[package])}
        assert not bad, f"{path.relative_to(LIBRARY.parent)} imports {sorted(bad)}"


def test_is_forbidden_matches_whole_module_names() -> None:
    assert is_forbidden("laneway.api.graphql.schema", ("laneway.api",))
    assert is_forbidden("app", ("app",))
    assert not is_forbidden("laneway.apiary", ("laneway.api",))


def test_the_library_never_imports_the_service() -> None:
    for path in LIBRARY.rglob("*.py"):
        bad = {n for n in imports_of(path) if is_forbidden(n, ("app",))}
        assert not bad, f"{path.relative_to(LIBRARY.parent)} imports the service: {sorted(bad)}"


def test_only_the_cli_configures_logging() -> None:
    for path in LIBRARY.rglob("*.py"):
        if path.parent == LIBRARY / "cli":
            continue
        assert "laneway.logs" not in imports_of(path), f"{path} imports laneway.logs"
        assert "basicConfig" not in path.read_text(), f"{path} configures logging"
