"""docker-compose.yml parses and runs PostgreSQL, one API server and two workers.

PyYAML is not a dependency, so the file is read with a minimal parser for the block-style
subset it uses (mappings, lists of scalars, quoted and plain scalars).
"""

from pathlib import Path
from typing import Any

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
