"""What bench/compare.py records about where it ran: the PostgreSQL server's settings, the
machine, the peers' versions and Laneway's commit. Read-only; nothing here changes a thing."""

import contextlib
import json
import os
import platform
import subprocess
from pathlib import Path

import asyncpg

ROOT = Path(__file__).resolve().parents[1]
PEER_PACKAGES = ("pgqueuer", "procrastinate", "dbos", "asyncpg", "psycopg", "sqlalchemy")


async def server_facts(url: str, given: bool) -> dict[str, str]:
    """The server's version and durability settings, and where it came from."""
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT name, setting, unit FROM pg_settings WHERE name IN"
            " ('server_version', 'fsync', 'synchronous_commit', 'full_page_writes',"
            " 'shared_buffers', 'max_connections', 'wal_level')"
        )
    finally:
        await conn.close()
    facts = {row["name"]: row["setting"] for row in rows}
    buffers = int(facts.get("shared_buffers", "0")) * 8 // 1024  # 8 kB pages
    facts["shared_buffers"] = f"{buffers} MB"
    facts["where"] = "DATABASE_URL" if given else "embedded (laneway.store.databases, tune=False)"
    return facts


def machine() -> dict[str, str]:
    """Cores, CPU, memory, Python and OS of this machine."""
    memory = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    cpu = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": str(len(os.sched_getaffinity(0))),
        "cpu": cpu,
        "memory": memory,
        "python": platform.python_version(),
        "os": platform.platform(terse=True),
    }


def versions(peers_python: Path) -> dict[str, str]:
    """The peers' package versions in `peers_python`'s venv, and Laneway's commit."""
    found: dict[str, str] = {}
    with contextlib.suppress(OSError, subprocess.SubprocessError, ValueError):
        script = (
            "import importlib.metadata as m, json, sys;"
            "print(json.dumps({p: m.version(p) for p in sys.argv[1:]}))"
        )
        output = subprocess.run(
            [str(peers_python), "-c", script, *PEER_PACKAGES],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        found.update(json.loads(output))
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        found["laneway"] = head + (" + uncommitted changes" if dirty else "")
    return found
