"""A private PostgreSQL server for the database-fault tests, and pg_ctl to restart or stop it.

Owns the server's lifecycle during a test: a throwaway embedded server (laneway/store/databases.py)
with durability left on (a crash restart must not lose acknowledged commits, which
`synchronous_commit = off` would), restarted in `fast` or `immediate` (crash) mode, or stopped
and started again. Never touches the shared test server.
"""

import asyncio
import contextlib
import os
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import pgserver

from laneway.store.databases import throwaway_server

PG_CTL = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pg_ctl"


@contextlib.contextmanager
def private_server() -> Iterator[str]:
    """An admin URL of a fresh embedded server with durable commits; deleted afterwards."""
    with throwaway_server(None, tune=False) as url:
        yield url


async def server_version(admin_url: str) -> str:
    """The server's version, as the run's tables print it."""
    conn = await asyncpg.connect(admin_url)
    try:
        return str(await conn.fetchval("SHOW server_version"))
    finally:
        await conn.close()


@dataclass(frozen=True, slots=True, kw_only=True)
class PostgresControl:
    """pg_ctl for one data directory, run as the user that owns it."""

    data_dir: Path
    owner_uid: int
    _options: list[str] = field(default_factory=list)

    @classmethod
    async def of(cls, admin_url: str) -> "PostgresControl":
        conn = await asyncpg.connect(admin_url)
        try:
            data_dir = Path(await conn.fetchval("SHOW data_directory"))
        finally:
            await conn.close()
        owner = (await asyncio.to_thread(os.stat, data_dir)).st_uid
        return cls(data_dir=data_dir, owner_uid=owner)

    async def _pg_ctl(self, *args: str) -> None:
        process = await asyncio.create_subprocess_exec(
            str(PG_CTL),
            "-D",
            str(self.data_dir),
            "-l",
            str(self.data_dir / "chaos.log"),
            "-w",
            *args,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            user=self.owner_uid if os.getuid() != self.owner_uid else None,
        )
        async with asyncio.timeout(120):
            code = await process.wait()
        if code != 0:
            raise RuntimeError(f"pg_ctl {' '.join(args)} exited with {code}")

    async def restart(self, mode: str) -> datetime:
        """Restart (`fast`, or `immediate`: a crash and recovery); when it accepts again."""
        await self._pg_ctl("-m", mode, "restart")
        return datetime.now(UTC)

    async def stop(self, mode: str = "fast") -> datetime:
        """Stop; the options it ran with are kept for `start` (postmaster.opts goes with it)."""
        opts = self.data_dir / "postmaster.opts"
        self._options.append(await asyncio.to_thread(opts.read_text))
        await self._pg_ctl("-m", mode, "stop")
        return datetime.now(UTC)

    async def start(self) -> datetime:
        """Start with the options of the last run (socket directory, listen addresses: the
        embedded server passes them on the command line, which `pg_ctl start` would drop)."""
        arguments = shlex.split(self._options[-1])[1:] if self._options else []
        if "-D" in arguments:  # pg_ctl passes the data directory itself
            at = arguments.index("-D")
            del arguments[at : at + 2]
        await self._pg_ctl("-o", shlex.join(arguments), "start")
        return datetime.now(UTC)
