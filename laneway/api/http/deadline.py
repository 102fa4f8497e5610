"""OperationDeadline: a /graphql request must answer within LANEWAY_OPERATION_TIMEOUT.

Owns the wall clock of one HTTP operation, as a pure ASGI middleware, and what its answer says
has happened; streamed subscriptions are exempt once their response starts. The websocket side
keeps its own per-operation clock (websocket.py).
"""

import asyncio
import logging

from laneway.api.graphql.errors import STOP_AT, TIMEOUT
from laneway.api.http.asgi import ASGIApp, Message, Receive, Scope, Send, route_path
from laneway.api.http.refusals import send_error
from laneway.api.request_trace import current_trace
from laneway.store.pool import statements_ended

logger = logging.getLogger(__name__)


class OperationDeadline:
    """Pure ASGI middleware: a GraphQL request on `path` must answer within `seconds`.

    Past the deadline the request is cancelled, and the transaction running then rolls back
    (the answer waits until its statement has ended on the server, see store.pool.statements_ended;
    one that finished in the moment before the cancel reached the server stays, unseen here:
    docs/limits.md says so, and that an idempotency key makes sending it again safe).
    A query has nothing else, nor has a mutation none of whose root fields completed: 504
    TIMEOUT. But root mutation fields run one after another, each in its own transaction, so
    those that completed before the deadline stay done: then the answer is 200 with
    `data: null` and a TIMEOUT error listing them (`extensions.completed`, their response
    keys, from the request's Trace), never a status that says nothing happened and invites the
    same request again. Once the response has started the clock stops, so streamed
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
            # Left once what was cancelled has ended: before saying it was rolled back.
            async with statements_ended(), deadline:
                await self.app(scope, receive, timed_send)
        except TimeoutError:
            if started or not deadline.expired():
                raise
            trace = current_trace()
            completed = list(trace.completed or ()) if trace is not None else []
            logger.warning(
                "operation timed out", extra={"seconds": self.seconds, "completed": completed}
            )
            took = f"The operation took longer than {self.seconds:g} s."
            if not completed:
                await send_error(scope, send, 504, took, TIMEOUT)
                return
            message = (
                f"{took} The root mutation fields that completed before then stay done"
                f" ({', '.join(completed)}); the one running was rolled back, and any after it"
                " did not run."
            )
            await send_error(
                scope,
                send,
                200,
                message,
                TIMEOUT,
                details={"completed": completed},
                executed=True,
            )
