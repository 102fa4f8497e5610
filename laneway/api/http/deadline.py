"""OperationDeadline: a /graphql request must answer within LANEWAY_OPERATION_TIMEOUT.

Owns the wall clock of one HTTP operation, as a pure ASGI middleware; streamed subscriptions
are exempt once their response starts. The websocket side keeps its own per-operation clock
(websocket.py).
"""

import asyncio
import logging

from laneway.api.graphql.errors import STOP_AT, TIMEOUT, send_error
from laneway.api.http.asgi import ASGIApp, Message, Receive, Scope, Send, route_path

logger = logging.getLogger(__name__)


class OperationDeadline:
    """Pure ASGI middleware: a GraphQL request on `path` must answer within `seconds`.

    Past the deadline the request is cancelled (its transaction rolls back) and answered
    504 with code TIMEOUT. Once the response has started the clock stops, so streamed
    subscriptions are exempt. `seconds` 0 turns the deadline off.
    """

    def __init__(self, app: ASGIApp, *, seconds: float, path: str = "/graphql") -> None:
        self.app = app
        self.seconds = seconds
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or route_path(scope).rstrip("/") != self.path
            or not self.seconds
        ):
            await self.app(scope, receive, send)
            return
        started = False
        deadline = asyncio.timeout(self.seconds)
        now = asyncio.get_running_loop().time()
        scope = {**scope, STOP_AT: now + self.seconds - min(self.seconds / 5, 1.0)}

        async def timed_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                deadline.reschedule(None)
            await send(message)

        try:
            async with deadline:
                await self.app(scope, receive, timed_send)
        except TimeoutError:
            if started or not deadline.expired():
                raise
            logger.warning("operation timed out", extra={"seconds": self.seconds})
            await send_error(
                send, 504, f"The operation took longer than {self.seconds:g} s.", TIMEOUT
            )
