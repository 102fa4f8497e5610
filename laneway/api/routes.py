"""Plain HTTP routes: /healthz, / (the dashboard, static/dashboard.html), and GraphiQL's page
and files (static/graphiql/).

Owns the health verdict (the database answers, the event listener is connected, the engine
loop runs or is turned off on purpose, no newer release migrated the database) and how the
pages are served: the dashboard as it is on disk, with a Content-Security-Policy that admits
only its own inline style and script;
GraphiQL's page with an integrity hash on each of its files, which /graphiql/{name} serves,
under a policy that admits scripts and styles from this origin only (and style elements with
the page's nonce). Knows nothing of GraphQL: the app's view decides when GraphiQL's page is
the answer (app.py), and both pages talk to `graphql` next to where they are served
(/graphql, or /laneway/graphql when a host mounts the app at /laneway) by themselves.
"""

import asyncio
import base64
import functools
import hashlib
import logging
import re
import secrets
from pathlib import Path

import asyncpg
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from laneway.api.lifespan import services_of
from laneway.store.pool import PoolBusyError

logger = logging.getLogger(__name__)

DATABASE_TIMEOUT_SECONDS = 2.0
DASHBOARD = Path(__file__).parent / "static" / "dashboard.html"
GRAPHIQL = Path(__file__).parent / "static" / "graphiql"
# The files GraphiQL's page may load, by suffix; the folder's other files (its page, README
# and licences) are not served as files.
GRAPHIQL_MEDIA_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
# Each file's URL carries a digest of its content, so a browser may keep it for a year.
GRAPHIQL_ASSET_CACHE = "public, max-age=31536000, immutable"
_GRAPHIQL_REFERENCE = re.compile(r'(src|href)="graphiql/([\w.-]+)"')
PAGE_HEADERS = {
    "cache-control": "no-cache",
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
}
_INLINE = {
    "script": re.compile(r"<script>(.*?)</script>", re.DOTALL),
    "style": re.compile(r"<style>(.*?)</style>", re.DOTALL),
}


async def healthz(request: Request) -> Response:
    """`{"database", "listener", "engine", "schema"}`, each "ok" (or "disabled"); 503 unless
    all are. The database is "unreachable" when it does not answer, "read-only" when it
    answers but cannot write (a standby, default_transaction_read_only), "busy" when it does
    but every connection of this process is in use; the schema is "newer" once a newer release
    migrated the database under this process (its API refuses every operation: restart it on
    that release).

    Also the hub's `lastEventID` and `subscribers`, for dashboards and tests.
    """
    services = services_of(request)
    database = "ok"
    try:
        async with asyncio.timeout(DATABASE_TIMEOUT_SECONDS):
            await services.store.ping()
    except Exception as exc:
        # Every connection of this process in use (its wait for one, or this check's own
        # timer, ran out meanwhile) is a load on it, not the database gone.
        if isinstance(exc, PoolBusyError) or services.store.connections_busy:
            logger.warning("health check: every database connection in use")
            database = "busy"
        elif isinstance(exc, asyncpg.ReadOnlySQLTransactionError):
            # Every write (enqueue, claim, step) is refused with 503 meanwhile.
            logger.warning("health check: database read-only")
            database = "read-only"
        else:
            error = type(exc).__name__
            logger.warning("health check: database unreachable", extra={"error": error})
            database = "unreachable"
    listener = "ok" if services.hub.is_connected else "disconnected"
    if not services.settings.engine_enabled:
        engine = "disabled"
    else:
        engine = "ok" if services.engine.is_running else "stopped"
    schema = "ok" if services.store.newer_release is None else "newer"
    body = {
        "database": database,
        "listener": listener,
        "engine": engine,
        "schema": schema,
        "lastEventID": services.hub.last_event_id,
        "subscribers": services.hub.subscriber_count,
    }
    healthy = (
        database == "ok" and listener == "ok" and engine in ("ok", "disabled") and schema == "ok"
    )
    return JSONResponse(body, status_code=200 if healthy else 503)


def _hashes(pattern: re.Pattern[str], page: str) -> str:
    digests = (hashlib.sha256(block.encode()).digest() for block in pattern.findall(page))
    return " ".join(f"'sha256-{base64.b64encode(d).decode()}'" for d in digests)


def content_security_policy(page: str) -> str:
    """The page's CSP: its own inline blocks (by hash) and connections to this origin only.

    Nothing may load from elsewhere, so the dashboard works with no internet, and an injected
    script or style would not run.
    """
    return _policy(
        f"script-src {_hashes(_INLINE['script'], page)}",
        f"style-src {_hashes(_INLINE['style'], page)}",
    )


def _policy(*sources: str) -> str:
    """A page's CSP: nothing but `sources`, connections to this origin, and no framing."""
    return "; ".join(
        (
            "default-src 'none'",
            *sources,
            "connect-src 'self'",
            "img-src 'self' data:",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        )
    )


GRAPHIQL_LINK = '<a href="graphql" data-testid="graphiql-link">GraphiQL</a>'


@functools.cache
def dashboard(*, graphiql: bool = True) -> tuple[bytes, dict[str, str]]:
    """The dashboard's bytes and headers, read once per process (restart to see an edit);
    without `graphiql`, with no link to it."""
    page = DASHBOARD.read_text(encoding="utf-8")
    if not graphiql:
        page = page.replace(GRAPHIQL_LINK, "")
    headers = {"content-security-policy": content_security_policy(page), **PAGE_HEADERS}
    return page.encode(), headers


async def home(request: Request) -> Response:
    """The dashboard: live instances, queues, an instance page and actions, and a link to
    GraphiQL (graphql) when the app serves it."""
    settings = getattr(request.scope.get("app"), "settings", None)  # a LanewayApp's
    body, headers = dashboard(graphiql=getattr(settings, "graphiql", True))
    return Response(body, media_type="text/html; charset=utf-8", headers=headers)


STYLE_NONCE_META = '<meta name="style-nonce">'


def graphiql_security_policy(style_nonce: str) -> str:
    """GraphiQL's policy: its files are Laneway's own (static/graphiql/), so 'self' is the only
    source of script and style, and nothing inline or evaluated runs, but for the style
    elements its dialogs add (react-remove-scroll), which carry the page's nonce. Its fonts
    are data: URLs in graphiql.min.css; connect-src 'self' admits this origin's websocket.
    """
    return _policy("script-src 'self'", f"style-src 'self' 'nonce-{style_nonce}'", "font-src data:")


@functools.cache
def graphiql_assets() -> dict[str, tuple[bytes, str]]:
    """GraphiQL's files by name, with their media types, read once per process."""
    return {
        path.name: (path.read_bytes(), GRAPHIQL_MEDIA_TYPES[path.suffix])
        for path in sorted(GRAPHIQL.iterdir())
        if path.suffix in GRAPHIQL_MEDIA_TYPES
    }


@functools.cache
def graphiql_page() -> bytes:
    """index.html with each file it loads pinned by an integrity hash and its URL versioned by
    a digest, so a browser neither runs an altered file nor keeps a stale one after an upgrade.

    Raises:
        KeyError: the page names a file the folder does not hold.
    """
    assets = graphiql_assets()

    def pinned(match: re.Match[str]) -> str:
        attribute, name = match.groups()
        digest = hashlib.sha384(assets[name][0]).digest()
        version = hashlib.sha256(assets[name][0]).hexdigest()[:12]
        integrity = f"sha384-{base64.b64encode(digest).decode()}"
        return f'{attribute}="graphiql/{name}?v={version}" integrity="{integrity}"'

    page = (GRAPHIQL / "index.html").read_text(encoding="utf-8")
    return _GRAPHIQL_REFERENCE.sub(pinned, page).encode()


def graphiql_response() -> Response:
    """GraphiQL's page, for the GraphQL view to answer a browser with (app.py), with a fresh
    style nonce, which start.js hands to the code that adds style elements."""
    nonce = secrets.token_urlsafe(16)
    meta = f'<meta name="style-nonce" content="{nonce}">'
    page = graphiql_page().replace(STYLE_NONCE_META.encode(), meta.encode(), 1)
    headers = {"content-security-policy": graphiql_security_policy(nonce), **PAGE_HEADERS}
    return Response(page, media_type="text/html; charset=utf-8", headers=headers)


async def graphiql_asset(request: Request) -> Response:
    """One of GraphiQL's files (static/graphiql/), or 404."""
    found = graphiql_assets().get(request.path_params["name"])
    if found is None:
        return PlainTextResponse("Not Found", status_code=404)
    body, media_type = found
    headers = {"cache-control": GRAPHIQL_ASSET_CACHE, "x-content-type-options": "nosniff"}
    return Response(body, media_type=media_type, headers=headers)
