"""Plain HTTP routes: /healthz, and / (the dashboard, static/dashboard.html).

Owns the health verdict (the database answers, the event listener is connected, the engine
loop runs or is turned off on purpose) and how the dashboard page is served: as it is on
disk, with a Content-Security-Policy that admits only its own inline style and script.
Knows nothing of GraphQL; the page talks to `graphql` next to where it is served (/graphql,
or /laneway/graphql when a host mounts the app at /laneway) by itself.
"""

import asyncio
import base64
import functools
import hashlib
import logging
import re
from pathlib import Path

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from laneway.api.lifespan import services_of

logger = logging.getLogger(__name__)

DATABASE_TIMEOUT_SECONDS = 2.0
DASHBOARD = Path(__file__).parent / "static" / "dashboard.html"
_INLINE = {
    "script": re.compile(r"<script>(.*?)</script>", re.DOTALL),
    "style": re.compile(r"<style>(.*?)</style>", re.DOTALL),
}


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


def _hashes(pattern: re.Pattern[str], page: str) -> str:
    digests = (hashlib.sha256(block.encode()).digest() for block in pattern.findall(page))
    return " ".join(f"'sha256-{base64.b64encode(d).decode()}'" for d in digests)


def content_security_policy(page: str) -> str:
    """The page's CSP: its own inline blocks (by hash) and connections to this origin only.

    Nothing may load from elsewhere, so the dashboard works with no internet, and an injected
    script or style would not run.
    """
    return "; ".join(
        (
            "default-src 'none'",
            f"script-src {_hashes(_INLINE['script'], page)}",
            f"style-src {_hashes(_INLINE['style'], page)}",
            "connect-src 'self'",
            "img-src 'self' data:",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        )
    )


@functools.cache
def dashboard() -> tuple[bytes, dict[str, str]]:
    """The dashboard's bytes and headers, read once per process (restart to see an edit)."""
    page = DASHBOARD.read_text(encoding="utf-8")
    headers = {
        "content-security-policy": content_security_policy(page),
        "cache-control": "no-cache",
        "referrer-policy": "no-referrer",
        "x-content-type-options": "nosniff",
    }
    return page.encode(), headers


async def home(request: Request) -> Response:
    """The dashboard: live instances, queues, an instance page and actions (GraphiQL: graphql)."""
    body, headers = dashboard()
    return Response(body, media_type="text/html; charset=utf-8", headers=headers)
