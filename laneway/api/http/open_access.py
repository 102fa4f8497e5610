"""OpenAccessNotice: one WARNING when an app with no API tokens first answers a remote client.

`laneway serve` refuses a non-loopback bind without LANEWAY_API_TOKENS (Settings.check_bind),
but a host that embeds Laneway's app serves it itself (`uvicorn mounted:app --host 0.0.0.0`),
where nothing asks: so the first request from a non-loopback address says, once per app, that
anyone who reaches it may read and write. It refuses nothing: a host may put its own
authentication in front. Only the default Permission with no tokens is open; a host's own
Permission, tokens, or LANEWAY_ALLOW_INSECURE=1 (open on purpose) leave nothing to say.
"""

import ipaddress
import logging

from laneway.api.auth import BearerTokens, Permission
from laneway.api.http.asgi import Scope
from laneway.config import Settings

logger = logging.getLogger(__name__)

OPEN_API = (
    "the Laneway API has no API tokens and answers clients beyond this machine: anyone who"
    " reaches it may read, start, cancel and change workflows. Set LANEWAY_API_TOKENS"
    " (comma-separated bearer tokens) to require one, or give create_app a Permission;"
    " LANEWAY_ALLOW_INSECURE=1 says it is open on purpose"
)


class OpenAccessNotice:
    """Watches an app's requests for its first remote client while it is open (see the module).

    `pending` is all a request costs once the warning is given, or when there is none to give.
    """

    __slots__ = ("pending",)

    def __init__(self, settings: Settings, permission: Permission) -> None:
        self.pending = (
            isinstance(permission, BearerTokens)
            and not permission.tokens
            and not settings.allow_insecure
        )

    def seen(self, scope: Scope) -> None:
        """Look at a request (or websocket) while `pending`: warn at the first remote one."""
        if scope["type"] not in ("http", "websocket"):
            return
        client = remote_client(scope)
        if client is not None:
            self.pending = False
            logger.warning(OPEN_API, extra={"client": client})


def remote_client(scope: Scope) -> str | None:
    """The client's address when it is an IP address off this machine; None for a loopback
    one, for none (a Unix socket) and for a name that is no address (a test client's)."""
    client = scope.get("client")
    if not client:
        return None
    try:
        address = ipaddress.ip_address(str(client[0]))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:127.0.0.1 is loopback (Python 3.11 says not)
    return None if address.is_loopback else str(client[0])
