"""AllowedHosts: the names a request to this process may be addressed to, whichever server
answers it (the API's HostAllowList, api/http/hosts.py; a worker's metrics port, metrics.py).

Owns the rule, not the refusal: a page on a name its owner points at 127.0.0.1 sends its own
name as `Host`, so a server that answers only for its own names keeps that page from reading
it (DNS rebinding). No I/O, no HTTP framework.
"""

import ipaddress
from dataclasses import dataclass

from laneway.config import ANY_HOST, Settings, is_loopback, split_host

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]"})
WILDCARD_ADDRESSES = frozenset({"", "0.0.0.0", "::", "[::]"})


def _bracketed(address: str) -> str:
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


@dataclass(frozen=True, slots=True)
class AllowedHosts:
    """The names a request may be addressed to.

    `local` names are allowed at the served port (any port when the server has none, a Unix
    socket); `exact` entries at their port, or at any port when it is None; `suffixes`
    (".example.com" for "*.example.com") cover the subdomains, not the domain itself.
    """

    local: frozenset[str]
    exact: frozenset[tuple[str, int | None]] = frozenset()
    suffixes: tuple[tuple[str, int | None], ...] = ()

    @classmethod
    def from_settings(cls, settings: Settings) -> "AllowedHosts | None":
        """The loopback names, the bind address and LANEWAY_ALLOWED_HOSTS; None: any host
        (tokens and no list, or a list with "*").

        Raises:
            ValueError: an entry is not a host pattern (Settings.from_env refuses it first).
        """
        listed = settings.allowed_hosts
        if ANY_HOST in listed or (settings.api_tokens and not listed):
            return None
        return cls._of(listed, settings.host)

    @classmethod
    def _of(cls, listed: tuple[str, ...], bind: str) -> "AllowedHosts":
        """The loopback names and the address `bind` (unless a wildcard), and `listed`."""
        local = set(LOOPBACK_NAMES)
        bound = None
        if bind not in WILDCARD_ADDRESSES:
            bound = split_host(_bracketed(bind))
        if bound is not None:
            local.add(bound[0])
        exact: set[tuple[str, int | None]] = set()
        suffixes: list[tuple[str, int | None]] = []
        for entry in listed:
            parsed = split_host(entry.removeprefix("*."))
            if parsed is None:
                raise ValueError(f"not a host pattern: {entry!r}")
            if entry.startswith("*."):
                suffixes.append(("." + parsed[0], parsed[1]))
            else:
                exact.add(parsed)
        return cls(local=frozenset(local), exact=frozenset(exact), suffixes=tuple(suffixes))

    @classmethod
    def for_metrics(cls, settings: Settings) -> "AllowedHosts | None":
        """The names a worker's metrics port (LANEWAY_METRICS_HOST) answers for: bound to a
        loopback address, the loopback names at its port and LANEWAY_ALLOWED_HOSTS, as the
        API without tokens (a page in a browser on this machine could otherwise read it);
        bound elsewhere, for a scraper, any name unless LANEWAY_ALLOWED_HOSTS lists them (the
        port has no token, and a scraper may address it by any name). None: any host."""
        listed = settings.allowed_hosts
        if ANY_HOST in listed or (not listed and not is_loopback(settings.metrics_host)):
            return None
        return cls._of(listed, settings.metrics_host)

    def allows(self, name: str, port: int, served: tuple[str, int | None] | None) -> bool:
        """May a request for `name`:`port` run on a server at `served` (scope["server"])?

        The served address itself counts as local when it is an IP address: that is the
        address `serve` bound to (or, bound to every interface, the one this client reached),
        and an address, unlike a name, cannot be rebound.
        """
        served_port = served[1] if served else None
        if served_port is None or port == served_port:
            if name in self.local:
                return True
            if served and name == _bracketed(served[0]) and _is_address(served[0]):
                return True
        if (name, None) in self.exact or (name, port) in self.exact:
            return True
        return any(
            name.endswith(suffix) and wanted in (None, port) for suffix, wanted in self.suffixes
        )

    def allows_header(
        self, value: str, served: tuple[str, int | None] | None, default_port: int = 80
    ) -> bool:
        """May a request whose Host header is `value` run on a server at `served`? A port
        left out is the scheme's `default_port`; a value that is no host is refused."""
        parsed = split_host(value)
        if parsed is None:
            return False
        name, port = parsed
        return self.allows(name, default_port if port is None else port, served)


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True
