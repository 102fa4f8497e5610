"""The Client of --url: the server's GraphQL API over HTTP (httpx) and websockets.

Owns the HTTP request (POST BASE/graphql with the bearer token) and how long it waits for an
answer, the graphql-transport-ws subscription that `watch` follows, and turning an
unreachable, silent or non-Laneway server into a one-line error that says whether the
request was sent at all. The workflows it knows are the server's.
"""

import asyncio
import contextlib
import json
import math
import sys
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import httpx

from laneway.cli.client import (
    EVENTS,
    EXIT_FAILED,
    EXIT_USAGE,
    CommandError,
    JSONObject,
    UnreachableError,
    raise_for_errors,
)

if TYPE_CHECKING:
    from websockets.asyncio.client import ClientConnection

PROTOCOL = "graphql-transport-ws"
# Close codes of a server going away or restarting, and of a connection lost without a close
# (1006): a watch subscribes again. Any other (4403, 4400, …) is the server's refusal.
RESUMABLE = frozenset({1001, 1006, 1011, 1012, 1013})
RECONNECT_SECONDS = 60.0
"""How long a watch tries to subscribe again after its connection dropped."""
TIMEOUT_SECONDS = 30.0
"""How long a request waits to connect, and for its answer (but execute_long_running's)."""
# Failures before the request went out: the server has seen nothing of it.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.ProxyError)


def base_url(text: str) -> str:
    """The server's base URL as given to --url, without a trailing slash or `/graphql`.

    Raises:
        CommandError: it is not an http(s) URL, or its port is not 1 to 65535 (exit 2).
    """
    url = text.strip().rstrip("/")
    url = url.removesuffix("/graphql")
    try:
        parsed = httpx.URL(url) if url.startswith(("http://", "https://")) else None
    except httpx.InvalidURL:  # http://[::1 (unclosed), a port that is not a number, ...
        parsed = None
    if parsed is None or not parsed.host:
        raise CommandError(
            f"--url must be the server's base URL, such as http://127.0.0.1:8000, not {text!r}",
            EXIT_USAGE,
        )
    # httpx takes any number as the port: 99999 failed only as it connected, said as a
    # server that cannot be reached (exit 1), as if one there were down.
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        raise CommandError(
            f"--url's port must be from 1 to 65535, not {parsed.port} (in {text!r})", EXIT_USAGE
        )
    return url


class RemoteClient:
    """GraphQL over HTTP to one server; `token` goes as `Authorization: Bearer …`."""

    def __init__(self, client: httpx.AsyncClient, url: str, token: str | None) -> None:
        self._client, self._url, self._token = client, url, token

    @property
    def where(self) -> str:
        return f"the server at {self._url}"

    def _authorization(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self._token}"} if self._token else {}

    async def execute(self, document: str, **variables: object) -> JSONObject:
        return await self._post(document, variables, self._client.timeout)

    async def execute_long_running(self, document: str, **variables: object) -> JSONObject:
        """`execute`, waiting for the answer as long as the server works on it, whose own
        deadline (LANEWAY_OPERATION_TIMEOUT) ends it: a shorter wait here would give up on
        work that goes on there. Connecting waits no longer than for any other request."""
        usual = self._client.timeout
        timeout = httpx.Timeout(
            connect=usual.connect, read=None, write=usual.write, pool=usual.pool
        )
        return await self._post(document, variables, timeout)

    async def _post(
        self, document: str, variables: dict[str, object], timeout: httpx.Timeout
    ) -> JSONObject:
        try:
            response = await self._client.post(
                f"{self._url}/graphql",
                json={"query": document, "variables": variables},
                headers=self._authorization(),
                timeout=timeout,
            )
        except NOT_SENT as exc:
            raise UnreachableError(f"cannot reach {self.where}: {_reason(exc)}") from None
        except httpx.ReadTimeout:
            seconds = timeout.read
            raise CommandError(f"{self.where} did not answer within {seconds:g} s") from None
        except httpx.TransportError as exc:
            raise CommandError(f"lost the answer of {self.where}: {_reason(exc)}") from None
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise CommandError(
                f"{self.where} answered HTTP {response.status_code} without a GraphQL response"
                " (is it a Laneway server? --url is its base URL, without /graphql)"
            )
        errors = body.get("errors")
        if errors is None and "error" in body:  # the JSON bodies of 413/429/503/504
            errors = [{"message": body.get("message") or body["error"], "extensions": body}]
        raise_for_errors(errors, self.where, retry_after=_seconds(response))
        status = response.status_code
        if not isinstance(body.get("data"), dict):  # GraphQL answers data, or errors saying why
            raise CommandError(
                f"the answer of {self.where} (HTTP {status}) has no data, and no errors to say"
                " why (is it a Laneway server, and of a version this command knows?)"
            )
        if status != 200:
            raise CommandError(f"{self.where} answered HTTP {status}")
        data: dict[str, Any] = self._checked(document, body["data"])
        return data

    def _checked(self, document: str, data: object) -> Any:
        """`data`, once it holds what `document` selects.

        Raises:
            CommandError: it does not (exit 1).
        """
        from laneway.cli.answers import lacking

        wrong = lacking(document, data)
        if wrong is not None:
            raise CommandError(
                f"the answer of {self.where} has no {wrong} where this command reads it"
                " (is it a Laneway server, and of a version this command knows?)"
            )
        return data

    def check_workflow(self, name: str) -> None:
        """Nothing to check here: the server's own registry decides."""

    @contextlib.asynccontextmanager
    async def follow(
        self, instance_id: str | None, after: str | None
    ) -> AsyncIterator[AsyncIterator[JSONObject]]:
        socket = await self._subscribe(instance_id, after)
        connection = [socket]  # the one open now: _resumed replaces it after a restart
        try:
            yield self._resumed(connection, instance_id, after)
        finally:
            await connection[0].close()

    async def _subscribe(self, instance_id: str | None, after: str | None) -> "ClientConnection":
        """A websocket with the subscription to the events after `after` started on it."""
        from websockets.asyncio.client import connect

        ws_url = "ws" + self._url.removeprefix("http") + "/graphql"
        variables = {"id": instance_id, "after": after}
        subscribe = {"query": EVENTS, "variables": variables}
        # Only the connection's own failures are said as the server's here: what the caller
        # raises while following (a closed stdout, say) passes through as it is.
        try:
            # A short close: a follower that stops (its reader gone) with replayed frames
            # unread would wait the library's 10 s for the close handshake.
            socket = await connect(ws_url, subprotocols=[PROTOCOL], close_timeout=1)  # type: ignore[list-item]
        except Exception as exc:
            raise self._websocket_error(exc, reached=False) from None
        try:
            init = {"type": "connection_init", "payload": self._authorization()}
            await socket.send(json.dumps(init))
            if self._message(await socket.recv()).get("type") != "connection_ack":
                raise CommandError(f"{self.where} did not accept the subscription")
            await socket.send(json.dumps({"id": "1", "type": "subscribe", "payload": subscribe}))
        except BaseException as exc:
            await socket.close()
            if isinstance(exc, Exception):
                raise self._websocket_error(exc, reached=False) from None
            raise
        return socket

    async def _resumed(
        self, connection: list["ClientConnection"], instance_id: str | None, after: str | None
    ) -> AsyncIterator[JSONObject]:
        """The subscription's events, across a server that restarts or a connection that
        drops (a deploy: uvicorn closes with 1012): subscribed again after the last event
        yielded, for up to RECONNECT_SECONDS, with a line on stderr. Any other end of the
        connection is the caller's error, as before."""
        while True:
            try:
                async for event in self._events(connection[0]):
                    after = str(event.get("eventID", after))
                    yield event
                return
            except _DroppedError as dropped:
                print(f"laneway: {dropped.error}; reconnecting", file=sys.stderr, flush=True)
                connection[0] = await self._resubscribe(instance_id, after, dropped.error)

    async def _resubscribe(
        self, instance_id: str | None, after: str | None, error: CommandError
    ) -> "ClientConnection":
        """Subscribe again, backing off, until RECONNECT_SECONDS have passed; then `error`."""
        deadline = time.monotonic() + RECONNECT_SECONDS
        delay = 0.1
        while True:
            await asyncio.sleep(delay)
            try:
                return await self._subscribe(instance_id, after)
            except CommandError:
                if time.monotonic() + delay > deadline:
                    raise error from None
            delay = min(delay * 2, 2.0)

    async def _events(self, socket: "ClientConnection") -> AsyncIterator[JSONObject]:
        """The subscription's events, answering pings, until the server completes it.

        Raises:
            _DroppedError: the connection ended as a restart or a network failure ends one.
        """
        from websockets.exceptions import ConnectionClosed

        try:
            async for raw in socket:
                message = self._message(raw)
                kind = message.get("type")
                if kind == "ping":
                    await socket.send(json.dumps({"type": "pong"}))
                elif kind == "next":
                    payload = message.get("payload")
                    payload = payload if isinstance(payload, dict) else {}
                    raise_for_errors(payload.get("errors"), self.where)
                    yield self._checked(EVENTS, payload.get("data"))["workflowEvents"]
                elif kind == "error":
                    raise_for_errors(message.get("payload") or [{}], self.where)
                elif kind == "complete":
                    return
        except Exception as exc:
            error = self._websocket_error(exc, reached=True)
            code = exc.rcvd.code if isinstance(exc, ConnectionClosed) and exc.rcvd else None
            dropped = isinstance(exc, ConnectionClosed) and (code is None or code in RESUMABLE)
            if isinstance(error, CommandError) and (dropped or isinstance(exc, OSError)):
                raise _DroppedError(error) from None
            raise error from None

    def _message(self, raw: str | bytes) -> dict[str, Any]:
        """One graphql-transport-ws message.

        Raises:
            CommandError: it is not one (not a JSON object).
        """
        try:
            message = json.loads(raw)
        except ValueError:
            message = None
        if not isinstance(message, dict):
            raise CommandError(f"{self.where} sent a websocket message that is not GraphQL's")
        return message

    def _websocket_error(self, exc: Exception, *, reached: bool) -> Exception:
        """What the websocket's failure `exc` means for the user: one line (`exc` itself when
        it is not the connection's). `reached`: the server had accepted the subscription."""
        from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

        if isinstance(exc, ConnectionClosed):
            return _closed(exc.rcvd.code if exc.rcvd else None, self.where)
        if isinstance(exc, InvalidStatus):
            return CommandError(
                f"{self.where} refused the websocket (HTTP {exc.response.status_code})"
            )
        if isinstance(exc, OSError | InvalidHandshake | TimeoutError):
            if reached:
                return CommandError(f"lost the connection to {self.where}: {_reason(exc)}")
            return UnreachableError(f"cannot reach {self.where}: {_reason(exc)}")
        return exc


class _DroppedError(Exception):
    """The subscription's connection dropped; `error` says so, if it cannot be resumed."""

    def __init__(self, error: CommandError) -> None:
        super().__init__(str(error))
        self.error = error


def _closed(code: int | None, where: str) -> CommandError:
    if code == 4403:  # graphql-transport-ws: Forbidden (no token, or a wrong one)
        return CommandError(
            f"{where} refused the subscription: pass a valid --token or set LANEWAY_TOKEN",
            EXIT_USAGE,
        )
    return CommandError(f"lost the connection to {where} (close code {code})", EXIT_FAILED)


def _seconds(response: httpx.Response) -> float | None:
    """The Retry-After of `response` in seconds (None: none given, or an HTTP date)."""
    try:
        seconds = float(response.headers["retry-after"])
    except (KeyError, ValueError):
        return None
    return seconds if 0 <= seconds < math.inf else None


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return text or type(exc).__name__


@contextlib.asynccontextmanager
async def open_remote(url: str, token: str | None) -> AsyncIterator[RemoteClient]:
    """A RemoteClient for the server at the base URL `url`."""
    async with httpx.AsyncClient(timeout=TIMEOUT_SECONDS) as client:
        yield RemoteClient(client, base_url(url), token)
