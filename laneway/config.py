"""Settings: the environment read once, validated, frozen.

Owns every environment variable Laneway understands. No other module reads `os.environ`;
callers pass the mapping in, so tests hand it a dict.
"""

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from laneway.errors import InvalidInputError

DEFAULT_DATA_DIR = Path(".laneway")
ANY_HOST = "*"
_HOST = re.compile(
    r"(?P<name>\[[0-9a-f:.]+\]|[a-z0-9_-]+(?:\.[a-z0-9_-]+)*)\.?(?::(?P<port>[0-9]{1,5}))?"
)


def _flag(environ: Mapping[str, str], key: str, default: bool) -> bool:
    raw = environ.get(key)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise InvalidInputError(f"{key} must be 0 or 1, not {raw!r}")


def _number(environ: Mapping[str, str], key: str, default: float, minimum: float) -> float:
    raw = environ.get(key)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InvalidInputError(f"{key} must be a number, not {raw!r}") from None
    if not value >= minimum:
        raise InvalidInputError(f"{key} must be at least {minimum}, not {raw!r}")
    return value


def _names(raw: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in (raw or "").split(",") if part.strip())


def is_loopback(host: str) -> bool:
    """True for localhost and the loopback ranges (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def split_host(value: str) -> tuple[str, int | None] | None:
    """A Host value's name (lower case, IPv6 in brackets, no trailing dot) and port, or None
    when it is not `name`, `name:port`, an IPv4 address or a bracketed IPv6 address."""
    match = _HOST.fullmatch(value.lower())
    if match is None:
        return None
    name, port = match["name"], match["port"]
    if name.startswith("["):
        try:
            ipaddress.IPv6Address(name[1:-1])
        except ValueError:
            return None
    if port is None:
        return name, None
    number = int(port)
    return (name, number) if number <= 65535 else None


def _hosts(environ: Mapping[str, str], key: str) -> tuple[str, ...]:
    entries = tuple(entry.lower() for entry in _names(environ.get(key)))
    for entry in entries:
        if entry != ANY_HOST and split_host(entry.removeprefix("*.")) is None:
            raise InvalidInputError(
                f"{key}: {entry!r} is not a host name, name:port, *.domain or *"
            )
    return entries


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Everything a Laneway process is configured with.

    `database_url` None means: start (or reuse) the embedded PostgreSQL in `data_dir`.
    """

    database_url: str | None = None
    data_dir: Path = DEFAULT_DATA_DIR
    workflow_modules: tuple[str, ...] = ()
    engine_enabled: bool = True
    host: str = "127.0.0.1"
    port: int = 8000
    api_tokens: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    open_reads: bool = False
    allow_insecure: bool = False
    lease_seconds: float = 30.0
    poll_interval_seconds: float = 2.0
    worker_concurrency: int = 100
    owner_id: str | None = None
    max_recoveries: int = 3
    shutdown_grace_seconds: float = 8.0
    retention_days: float = 7.0
    statement_timeout_seconds: float = 30.0
    lock_timeout_seconds: float = 2.0
    idle_in_transaction_timeout_seconds: float = 60.0
    pool_size: int = 10
    graphiql: bool = True
    rate_limit_per_second: float = 20.0
    rate_burst: int = 40
    ws_handshakes_per_minute: int = 10
    ws_connections_per_token: int = 5
    limit_local_clients: bool = False
    operation_timeout_seconds: float = 10.0
    header_timeout_seconds: float = 5.0
    max_connections: int = 1000
    metrics_port: int | None = None  # a worker serves /metrics here (the API at its own /metrics)
    metrics_host: str = "127.0.0.1"
    gc_freeze: bool = True  # freeze the start-up heap once services are built (heap.py)
    extra: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> "Settings":
        """Read and validate the environment.

        Raises:
            InvalidInputError: a value is malformed.
        """
        port = int(_number(environ, "PORT", 8000, 0))
        if port > 65535:
            raise InvalidInputError(f"PORT must be at most 65535, not {port}")
        metrics_port = (
            int(_number(environ, "LANEWAY_METRICS_PORT", -1, 0))
            if environ.get("LANEWAY_METRICS_PORT")
            else None
        )
        if metrics_port is not None and metrics_port > 65535:
            raise InvalidInputError(
                f"LANEWAY_METRICS_PORT must be at most 65535, not {metrics_port}"
            )
        return cls(
            database_url=environ.get("DATABASE_URL") or None,
            data_dir=Path(environ.get("LANEWAY_DATA_DIR") or DEFAULT_DATA_DIR),
            workflow_modules=_names(environ.get("LANEWAY_WORKFLOWS")),
            engine_enabled=_flag(environ, "LANEWAY_ENGINE", True),
            host=environ.get("HOST") or "127.0.0.1",
            port=port,
            api_tokens=_names(environ.get("LANEWAY_API_TOKENS")),
            allowed_hosts=_hosts(environ, "LANEWAY_ALLOWED_HOSTS"),
            open_reads=_flag(environ, "LANEWAY_OPEN_READS", False),
            allow_insecure=_flag(environ, "LANEWAY_ALLOW_INSECURE", False),
            lease_seconds=_number(environ, "LANEWAY_LEASE_SECONDS", 30.0, 0.5),
            poll_interval_seconds=_number(environ, "LANEWAY_POLL_SECONDS", 2.0, 0.01),
            worker_concurrency=int(_number(environ, "LANEWAY_WORKER_CONCURRENCY", 100, 1)),
            owner_id=environ.get("LANEWAY_OWNER_ID") or None,
            max_recoveries=int(_number(environ, "LANEWAY_MAX_RECOVERIES", 3, 0)),
            shutdown_grace_seconds=_number(environ, "LANEWAY_SHUTDOWN_GRACE", 8.0, 0.0),
            retention_days=_number(environ, "LANEWAY_RETENTION_DAYS", 7.0, 0.0),
            statement_timeout_seconds=_number(environ, "LANEWAY_STATEMENT_TIMEOUT", 30.0, 0.0),
            lock_timeout_seconds=_number(environ, "LANEWAY_LOCK_TIMEOUT", 2.0, 0.0),
            idle_in_transaction_timeout_seconds=_number(
                environ, "LANEWAY_IDLE_IN_TRANSACTION_TIMEOUT", 60.0, 0.0
            ),
            pool_size=int(_number(environ, "LANEWAY_POOL_SIZE", 10, 2)),
            graphiql=_flag(environ, "LANEWAY_GRAPHIQL", True),
            rate_limit_per_second=_number(environ, "LANEWAY_RATE_LIMIT", 20.0, 0.0),
            rate_burst=int(_number(environ, "LANEWAY_RATE_BURST", 40, 1)),
            ws_handshakes_per_minute=int(
                _number(environ, "LANEWAY_WS_HANDSHAKES_PER_MINUTE", 10, 0)
            ),
            ws_connections_per_token=int(
                _number(environ, "LANEWAY_WS_CONNECTIONS_PER_TOKEN", 5, 0)
            ),
            operation_timeout_seconds=_number(environ, "LANEWAY_OPERATION_TIMEOUT", 10.0, 0.0),
            header_timeout_seconds=_number(environ, "LANEWAY_HEADER_TIMEOUT", 5.0, 0.0),
            max_connections=int(_number(environ, "LANEWAY_MAX_CONNECTIONS", 1000, 0)),
            limit_local_clients=_flag(environ, "LANEWAY_LIMIT_LOCAL_CLIENTS", False),
            metrics_port=metrics_port,
            metrics_host=environ.get("LANEWAY_METRICS_HOST") or "127.0.0.1",
            gc_freeze=_flag(environ, "LANEWAY_GC_FREEZE", True),
        )

    def check_bind(self, host: str) -> None:
        """Refuse to serve on a non-loopback address with no token unless explicitly allowed.

        Raises:
            InvalidInputError: the bind would expose an unauthenticated API.
        """
        if not self.api_tokens and not self.allow_insecure and not is_loopback(host):
            raise InvalidInputError(
                f"refusing to serve on {host} without LANEWAY_API_TOKENS; "
                "set LANEWAY_ALLOW_INSECURE=1 to allow it"
            )
