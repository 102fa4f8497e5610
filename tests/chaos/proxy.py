"""TcpProxy: a TCP proxy in front of the test server that can pass, blackhole or reset traffic.

Owns the links between clients (a worker, a listener) and PostgreSQL. Modes, set with
`set_mode` and applied to open links and new ones alike (a network partition, R-03 in
docs/reliability.md):

- `pass`: bytes are forwarded. Links that were blackholed are reset first: bytes were
  swallowed, so their protocol streams are corrupt and no real peer would continue them.
- `blackhole`: bytes are swallowed both ways and neither side is told; sockets stay open and
  no FIN is sent, as when a host vanishes (pg-boss's halfOpenProxy). New connections are
  accepted and swallowed too.
- `close`: every link is reset (RST, not FIN) and new connections are reset at once.

The listener tests use two narrower switches: `blackhole()` makes only the links open now
half-open (a reconnect gets through), and `refuse()` / `accept()` turn new connections away
without touching open ones.
"""

import asyncio
import contextlib
import socket
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

Mode = Literal["pass", "blackhole", "close"]


@dataclass(eq=False)
class _Link:
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    blackholed: bool = False


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST where the socket is TCP (SO_LINGER 0); plain close otherwise."""
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.close()


class TcpProxy:
    """TCP on 127.0.0.1 in front of the test server (reached over a unix socket or TCP)."""

    def __init__(self, database_url: str) -> None:
        parts = urlsplit(database_url)
        query = dict(parse_qsl(parts.query))
        socket_dir = query.pop("host", "")
        port = parts.port or int(query.pop("port", "5432"))
        self._unix_path = f"{socket_dir}/.s.PGSQL.{port}" if socket_dir.startswith("/") else None
        self._tcp_target = (parts.hostname or "127.0.0.1", port)
        self._parts = parts._replace(query=urlencode(query))
        self._links: list[_Link] = []
        self._handlers: set[asyncio.Task[None]] = set()
        self._refusing = False
        self.mode: Mode = "pass"
        self.accepted = 0

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        """Serve until exit; yields the URL that reaches the server through the proxy."""
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        user = self._parts.username or "postgres"
        password = f":{self._parts.password}" if self._parts.password else ""
        try:
            yield urlunsplit(self._parts._replace(netloc=f"{user}{password}@127.0.0.1:{port}"))
        finally:
            server.close()
            for link in self._links:
                for writer in link.writers:
                    writer.close()
            # Handlers end once their sockets are closed (cancelling them would make asyncio's
            # stream callback log the CancelledError).
            if self._handlers:
                await asyncio.wait(self._handlers, timeout=5)
            await server.wait_closed()

    @property
    def partitioned(self) -> bool:
        """True while the mode is `blackhole`; read afresh after an await, as it may have moved."""
        return self.mode == "blackhole"

    @property
    def open_links(self) -> int:
        return sum(1 for link in self._links if not link.writers[0].is_closing())

    def set_mode(self, mode: Mode) -> None:
        """Switch every link, open or future, to `mode` (see the module docstring)."""
        self.mode = mode
        if mode == "blackhole":
            for link in self._links:
                link.blackholed = True
            return
        for link in self._links:
            if mode == "close" or link.blackholed:
                for writer in link.writers:
                    _reset(writer)
        self._links = [link for link in self._links if not link.writers[0].is_closing()]

    def blackhole(self) -> None:
        """Make the links open now half-open; new connections still pass."""
        for link in self._links:
            link.blackholed = True

    def refuse(self) -> None:
        """Close new connections at once, as a server that is down; open links stay."""
        self._refusing = True

    def accept(self) -> None:
        self._refusing = False

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self.accepted += 1
        try:
            if self._refusing or self.mode == "close":
                _reset(writer)
                return
            if self.mode == "blackhole":
                await self._swallow(reader, writer)
                return
            if self._unix_path is not None:
                up_reader, up_writer = await asyncio.open_unix_connection(self._unix_path)
            else:
                up_reader, up_writer = await asyncio.open_connection(*self._tcp_target)
            # A partition that began while this link was still connecting upstream covers it
            # too: set_mode only marked the links already registered.
            link = _Link(writers=[writer, up_writer], blackholed=self.partitioned)
            self._links.append(link)
            async with asyncio.TaskGroup() as pipes:
                pipes.create_task(self._pipe(link, reader, up_writer))
                pipes.create_task(self._pipe(link, up_reader, writer))
        except OSError:
            pass  # the server is down: the client sees its connection closed
        finally:
            writer.close()
            self._handlers.discard(task)

    async def _swallow(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A connection made during a partition: it never reaches the server. Registered as a
        # blackholed link so that healing resets it.
        link = _Link(writers=[writer], blackholed=True)
        self._links.append(link)
        with contextlib.suppress(OSError):
            while await reader.read(65536):
                pass

    async def _pipe(
        self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            while data := await reader.read(65536):
                if not link.blackholed:
                    writer.write(data)
                    await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()
