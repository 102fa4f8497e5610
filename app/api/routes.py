"""Plain HTTP routes: /healthz, and / (GraphiQL until the dashboard arrives in issue 5).

Owns the health verdict: the database answers, the event listener is connected, the engine
loop runs (or is turned off on purpose). Knows nothing of GraphQL.
"""

import asyncio
import logging

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from app.api.context import services_of

logger = logging.getLogger(__name__)

DATABASE_TIMEOUT_SECONDS = 2.0


async def healthz(request: Request) -> Response:
    """`{"database", "listener", "engine"}`, each "ok" (or "disabled"); 503 unless all are.

    Also the hub's `lastEventID` and `subscribers`, for dashboards and tests.
    """
    services = services_of(request)
    database = "ok"
    try:
        async with asyncio.timeout(DATABASE_TIMEOUT_SECONDS):
            await services.store.ping()
    except Exception as exc:
        logger.warning("health check: database unreachable", extra={"error": type(exc).__name__})
        database = "unreachable"
    listener = "ok" if services.hub.is_connected else "disconnected"
    if not services.settings.engine_enabled:
        engine = "disabled"
    else:
        engine = "ok" if services.engine.is_running else "stopped"
    body = {
        "database": database,
        "listener": listener,
        "engine": engine,
        "lastEventID": services.hub.last_event_id,
        "subscribers": services.hub.subscriber_count,
    }
    healthy = database == "ok" and listener == "ok" and engine in ("ok", "disabled")
    return JSONResponse(body, status_code=200 if healthy else 503)


async def home(request: Request) -> Response:
    """The API's front door: GraphiQL for now."""
    return RedirectResponse("/graphql")
