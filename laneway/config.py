"""Settings: the environment read once, validated, frozen.

Owns every environment variable Laneway understands, and the list of them (KNOWN_VARIABLES)
that an unknown `LANEWAY_` name is told apart by. No other module reads `os.environ`; callers
pass the mapping in, so tests hand it a dict.
"""

import difflib
import ipaddress
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from laneway.errors import InvalidInputError

logger = logging.getLogger(__name__)

DEFAULT_DATA_DIR = Path(".laneway")
MAX_PORT = 65_535
DAY_SECONDS = 86_400.0
MAX_TIMEOUT_SECONDS = 2_147_483.0  # PostgreSQL's timeouts are int milliseconds (~24.8 days)
MAX_COUNT = 1_000_000  # concurrency, rates, bursts and caps: far past any real setting
ANY_HOST = "*"
# Every connection names its process in application_name, `laneway-<role>-<owner id>`
# (services.py), the longest role being `listener`. PostgreSQL keeps 63 bytes of it
# (NAMEDATALEN - 1) and only printable ASCII: a longer or other owner id would be cut or
# altered there, and pg_stat_activity (or the chaos checker, which reads the owner back out
# of it) would name a process that does not exist.
APPLICATION_NAME_BYTES = 63
MAX_OWNER_ID_LENGTH = APPLICATION_NAME_BYTES - len("laneway-listener-")
_OWNER_ID = re.compile(r"[!-~]+")  # printable ASCII, no space
# A number as the docs write one: ASCII digits, a point and an exponent allowed.
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_HOST = re.compile(
    r"(?P<name>\[[0-9a-f:.]+\]|[a-z0-9_-]+(?:\.[a-z0-9_-]+)*)\.?(?::(?P<port>[0-9]{1,5}))?"
)


# Every environment variable starting with LANEWAY_ that something reads: Settings.from_env's
# (below); LANEWAY_TOKEN, the command line's bearer token for --url; LANEWAY_FAULTS
# (engine/faults.py); LANEWAY_TEST_DATABASE_URL (laneway/testing.py's server for a test
# session); and the few that Laneway's own test suite sets for the processes it starts, so
# that its runs warn of nothing. tests/test_config.py finds every LANEWAY_ name that laneway/
# or tests/ reads here. Any other LANEWAY_ name is warned about (unknown_variables): a setting
# spelled wrong was silently ignored.
KNOWN_VARIABLES = frozenset(
    {
        "LANEWAY_ALLOWED_HOSTS",
        "LANEWAY_ALLOW_INSECURE",
        "LANEWAY_API_TOKENS",
        "LANEWAY_DATA_DIR",
        "LANEWAY_ENGINE",
        "LANEWAY_FAULTS",
        "LANEWAY_GC_FREEZE",
        "LANEWAY_GRAPHIQL",
        "LANEWAY_HEADER_TIMEOUT",
        "LANEWAY_IDLE_IN_TRANSACTION_TIMEOUT",
        "LANEWAY_LEASE_SECONDS",
        "LANEWAY_LIMIT_LOCAL_CLIENTS",
        "LANEWAY_LOCK_TIMEOUT",
        "LANEWAY_MAX_CONNECTIONS",
        "LANEWAY_MAX_RECOVERIES",
        "LANEWAY_METRICS_HOST",
        "LANEWAY_METRICS_PORT",
        "LANEWAY_OPEN_READS",
        "LANEWAY_OPERATION_TIMEOUT",
        "LANEWAY_OWNER_ID",
        "LANEWAY_POLL_SECONDS",
        "LANEWAY_POOL_SIZE",
        "LANEWAY_RATE_BURST",
        "LANEWAY_RATE_LIMIT",
        "LANEWAY_RETENTION_DAYS",
        "LANEWAY_SHUTDOWN_GRACE",
        "LANEWAY_STATEMENT_TIMEOUT",
        "LANEWAY_TEST_DATABASE_URL",
        "LANEWAY_TOKEN",
        "LANEWAY_TRACING",
        "LANEWAY_WORKER_CONCURRENCY",
        "LANEWAY_WORKFLOWS",
        "LANEWAY_WS_CONNECTIONS_PER_TOKEN",
        "LANEWAY_WS_HANDSHAKES_PER_MINUTE",
        # Laneway's own test suite (tests/), not settings:
        "LANEWAY_CHAOS_BUSY_THREADS",
        "LANEWAY_CHAOS_FULL",
        "LANEWAY_CHAOS_LEDGER_URL",
        "LANEWAY_CHAOS_WORKER",
        "LANEWAY_TEST_HOLD_SECOND",
        "LANEWAY_TEST_LEDGER",
        "LANEWAY_TEST_POISON",
    }
)
# Unknown names meant as a known one that difflib would not find close enough.
MISTAKEN_VARIABLES = {"LANEWAY_DATABASE_URL": "DATABASE_URL"}


def unknown_variables(environ: Mapping[str, str]) -> dict[str, str | None]:
    """Each variable of `environ` that starts with LANEWAY_ (in any case: names are
    case-sensitive, so `laneway_workflows` is not read either) and that Laneway does not read,
    in name order, with the known variable it was likely meant as (None: none is close)."""
    # Compared without the prefix, which every name shares: with it, any name was close. A
    # mistaken name is a candidate too, so a slip of LANEWAY_DATABASE_URL is taken to mean
    # DATABASE_URL, not the closest known name (LANEWAY_TEST_DATABASE_URL).
    candidates = sorted(KNOWN_VARIABLES) + sorted(MISTAKEN_VARIABLES)
    known = {name.removeprefix("LANEWAY_"): name for name in candidates}
    prefix = len("LANEWAY_")
    unknown: dict[str, str | None] = {}
    for name in sorted(environ):
        if name[:prefix].upper() == "LANEWAY_" and name not in KNOWN_VARIABLES:
            close = difflib.get_close_matches(name[prefix:].upper(), known, n=1)
            meant = known[close[0]] if close else None
            unknown[name] = MISTAKEN_VARIABLES.get(meant or "", meant)
    return unknown


def unknown_variable_warning(name: str, meant: str | None) -> str:
    """What to say of an unknown variable `name` (unknown_variables's)."""
    said = f"{name} is not a variable Laneway reads: it is ignored"
    return f"{said} (did you mean {meant}?)" if meant else said


def flag_value(raw: str | None, default: bool) -> bool:
    """A switch as the environment gives it: 1/true/yes/on or 0/false/no/off, in any case,
    spaces around allowed; unset or blank: `default`.

    Raises:
        ValueError: any other word.
    """
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ValueError(raw)


def _flag(environ: Mapping[str, str], key: str, default: bool) -> bool:
    raw = environ.get(key)
    try:
        return flag_value(raw, default)
    except ValueError:
        raise InvalidInputError(
            f"{key} must be on (1, true, yes, on) or off (0, false, no, off), not {raw!r}"
        ) from None


def _number(
    environ: Mapping[str, str], key: str, default: float, minimum: float, maximum: float
) -> float:
    """A finite number from `minimum` to `maximum` (the default when unset or blank).

    Raises:
        InvalidInputError: not a number, not finite, or out of that range; names `key`.
    """
    raw = environ.get(key)
    if raw is None or raw.strip() == "":
        return default
    if _DECIMAL.fullmatch(raw.strip()) is None:  # float() takes `1_0`, `٣٠`, `inf` too
        raise InvalidInputError(f"{key} must be a number, not {raw!r}")
    value = float(raw)
    if not minimum <= value <= maximum:  # also NaN and the infinities
        raise InvalidInputError(
            f"{key} must be a number from {_shown(minimum)} to {_shown(maximum)}, not {raw!r}"
        )
    return value


def _shown(bound: float) -> str:
    return f"{int(bound):,}" if float(bound).is_integer() else f"{bound:g}"


def _whole(environ: Mapping[str, str], key: str, default: int, minimum: int, maximum: int) -> int:
    """`_number`, and a whole number.

    Raises:
        InvalidInputError: as `_number`, or it has a fraction; names `key`.
    """
    value = float(_number(environ, key, default, minimum, maximum))
    if not value.is_integer():
        raise InvalidInputError(f"{key} must be a whole number, not {environ.get(key)!r}")
    return int(value)


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


def token_flaw(token: str) -> str | None:
    """Why `token` cannot go in an `Authorization: Bearer` header ("its character 3 is not
    ASCII"), or None: a bearer token is visible ASCII only. The flaw never quotes the token:
    it is a secret."""
    for at, char in enumerate(token, 1):
        if "!" <= char <= "~":
            continue
        if char in " \n\r":
            kind = "a space" if char == " " else "a line break"
        else:
            kind = "a control character" if char.isascii() else "not ASCII"
        return f"its character {at} is {kind}"
    return None


# Shorter tokens can be guessed: `serve` on a public address refuses them (check_bind).
MIN_TOKEN_LENGTH = 16

TOKEN_RULE = (
    "must hold only visible ASCII characters, as a bearer token does (letters, digits and"
    " punctuation, without spaces or line breaks)"
)


def _tokens(raw: str | None) -> tuple[str, ...]:
    """LANEWAY_API_TOKENS, checked: a token no client can send would refuse every caller.

    Raises:
        InvalidInputError: a token is not visible ASCII; names which one, never its text.
    """
    tokens = _names(raw)
    for number, token in enumerate(tokens, 1):
        if (flaw := token_flaw(token)) is not None:
            raise InvalidInputError(f"LANEWAY_API_TOKENS {TOKEN_RULE}: token {number}: {flaw}")
    return tokens


def _hosts(environ: Mapping[str, str], key: str) -> tuple[str, ...]:
    entries = tuple(entry.lower() for entry in _names(environ.get(key)))
    for entry in entries:
        if entry != ANY_HOST and split_host(entry.removeprefix("*.")) is None:
            raise InvalidInputError(
                f"{key}: {entry!r} is not a host name, name:port, *.domain or *"
            )
    return entries


def _owner_id(raw: str | None) -> str | None:
    """LANEWAY_OWNER_ID, or None (a generated one) when unset or blank.

    Raises:
        InvalidInputError: longer than MAX_OWNER_ID_LENGTH, or not printable ASCII.
    """
    if raw is None or raw.strip() == "":
        return None
    if _OWNER_ID.fullmatch(raw) is None:
        raise InvalidInputError(
            "LANEWAY_OWNER_ID must be printable ASCII with no spaces (PostgreSQL's"
            f" application_name keeps no other), not {raw!r}"
        )
    if len(raw) > MAX_OWNER_ID_LENGTH:
        raise InvalidInputError(
            f"LANEWAY_OWNER_ID must be at most {MAX_OWNER_ID_LENGTH} characters, not"
            f" {len(raw)}: it is named in application_name (laneway-listener-<id>), which"
            f" PostgreSQL cuts at {APPLICATION_NAME_BYTES} bytes"
        )
    return raw


def _database_url(url: str | None) -> str | None:
    """DATABASE_URL, when it names a PostgreSQL server (postgresql:// or postgres://).

    Raises:
        InvalidInputError: it names something else.
    """
    if url is None:
        return None
    if not url.startswith(("postgresql://", "postgres://")):
        # Not echoed: a mistyped value may hold a password.
        scheme = url.partition("://")[0] if "://" in url else None
        given = f", not a {scheme}:// one" if scheme and scheme.isalnum() else ""
        raise InvalidInputError(
            "DATABASE_URL must be a PostgreSQL URL, as in "
            f"postgresql://user:password@host:5432/db{given}"
        )
    try:
        netloc = urlsplit(url).netloc
    except ValueError as exc:  # a malformed [IPv6] address
        raise InvalidInputError(f"DATABASE_URL is not a valid URL: {exc}") from None
    for address in netloc.rpartition("@")[2].split(","):  # host[:port], one or several
        after_name = address.rsplit("]", 1)[-1]
        port = after_name.rpartition(":")[2] if ":" in after_name else ""
        if not port:
            continue
        # ASCII digits only (isdigit() takes `٥٤٣٢` too), and a port's range: out of it, the
        # connection was tried and failed as "Connection refused", an unreachable server.
        if not port.isascii() or not port.isdigit():
            raise InvalidInputError(f"DATABASE_URL: {port!r} is not a port number")
        if int(port) > 65535:
            raise InvalidInputError(f"DATABASE_URL: port {port} is not a port from 0 to 65535")
    return url


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
    # What gave metrics_port, named when it cannot be listened on: the variable, or the flag
    # of `laneway worker` that replaced it.
    metrics_port_given_by: str = "LANEWAY_METRICS_PORT"
    metrics_host: str = "127.0.0.1"
    gc_freeze: bool = True  # freeze the start-up heap once services are built (heap.py)
    # OpenTelemetry spans (with the otel extra installed): the engine's and the GraphQL
    # operations' (open_services passes it to the Engine; spans.py reads it per operation).
    tracing: bool = True
    extra: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> "Settings":
        """Read and validate the environment. A variable starting with LANEWAY_ that Laneway
        does not read is logged as a WARNING record `environment variable ignored` (with
        `variable`, and `did_you_mean` when a known one is close), once per call.

        Raises:
            InvalidInputError: a value is malformed.
        """
        for name, meant in unknown_variables(environ).items():
            said = (
                {"variable": name} if meant is None else {"variable": name, "did_you_mean": meant}
            )
            logger.warning("environment variable ignored", extra=said)
        return cls(
            database_url=_database_url(environ.get("DATABASE_URL") or None),
            data_dir=Path(environ.get("LANEWAY_DATA_DIR") or DEFAULT_DATA_DIR),
            workflow_modules=_names(environ.get("LANEWAY_WORKFLOWS")),
            engine_enabled=_flag(environ, "LANEWAY_ENGINE", True),
            host=environ.get("HOST") or "127.0.0.1",
            port=_whole(environ, "PORT", 8000, 0, MAX_PORT),
            api_tokens=_tokens(environ.get("LANEWAY_API_TOKENS")),
            allowed_hosts=_hosts(environ, "LANEWAY_ALLOWED_HOSTS"),
            open_reads=_flag(environ, "LANEWAY_OPEN_READS", False),
            allow_insecure=_flag(environ, "LANEWAY_ALLOW_INSECURE", False),
            lease_seconds=_number(environ, "LANEWAY_LEASE_SECONDS", 30.0, 0.5, DAY_SECONDS),
            poll_interval_seconds=_number(environ, "LANEWAY_POLL_SECONDS", 2.0, 0.01, 3600.0),
            worker_concurrency=_whole(environ, "LANEWAY_WORKER_CONCURRENCY", 100, 1, MAX_COUNT),
            owner_id=_owner_id(environ.get("LANEWAY_OWNER_ID")),
            max_recoveries=_whole(environ, "LANEWAY_MAX_RECOVERIES", 3, 0, 1000),
            shutdown_grace_seconds=_number(
                environ, "LANEWAY_SHUTDOWN_GRACE", 8.0, 0.0, DAY_SECONDS
            ),
            retention_days=_number(environ, "LANEWAY_RETENTION_DAYS", 7.0, 0.0, 36_500.0),
            statement_timeout_seconds=_number(
                environ, "LANEWAY_STATEMENT_TIMEOUT", 30.0, 0.0, MAX_TIMEOUT_SECONDS
            ),
            lock_timeout_seconds=_number(
                environ, "LANEWAY_LOCK_TIMEOUT", 2.0, 0.0, MAX_TIMEOUT_SECONDS
            ),
            idle_in_transaction_timeout_seconds=_number(
                environ, "LANEWAY_IDLE_IN_TRANSACTION_TIMEOUT", 60.0, 0.0, MAX_TIMEOUT_SECONDS
            ),
            pool_size=_whole(environ, "LANEWAY_POOL_SIZE", 10, 2, 1000),
            graphiql=_flag(environ, "LANEWAY_GRAPHIQL", True),
            rate_limit_per_second=_number(environ, "LANEWAY_RATE_LIMIT", 20.0, 0.0, MAX_COUNT),
            rate_burst=_whole(environ, "LANEWAY_RATE_BURST", 40, 1, MAX_COUNT),
            ws_handshakes_per_minute=_whole(
                environ, "LANEWAY_WS_HANDSHAKES_PER_MINUTE", 10, 0, MAX_COUNT
            ),
            ws_connections_per_token=_whole(
                environ, "LANEWAY_WS_CONNECTIONS_PER_TOKEN", 5, 0, MAX_COUNT
            ),
            operation_timeout_seconds=_number(
                environ, "LANEWAY_OPERATION_TIMEOUT", 10.0, 0.0, DAY_SECONDS
            ),
            header_timeout_seconds=_number(
                environ, "LANEWAY_HEADER_TIMEOUT", 5.0, 0.0, DAY_SECONDS
            ),
            max_connections=_whole(environ, "LANEWAY_MAX_CONNECTIONS", 1000, 0, MAX_COUNT),
            limit_local_clients=_flag(environ, "LANEWAY_LIMIT_LOCAL_CLIENTS", False),
            metrics_port=(
                _whole(environ, "LANEWAY_METRICS_PORT", 0, 0, MAX_PORT)
                if (environ.get("LANEWAY_METRICS_PORT") or "").strip()
                else None
            ),
            metrics_host=environ.get("LANEWAY_METRICS_HOST") or "127.0.0.1",
            gc_freeze=_flag(environ, "LANEWAY_GC_FREEZE", True),
            tracing=_flag(environ, "LANEWAY_TRACING", True),
        )

    def short_tokens(self) -> tuple[int, ...]:
        """The places (from 1) of the LANEWAY_API_TOKENS shorter than MIN_TOKEN_LENGTH."""
        return tuple(n for n, t in enumerate(self.api_tokens, 1) if len(t) < MIN_TOKEN_LENGTH)

    def check_bind(self, host: str) -> None:
        """Refuse to serve on a non-loopback address with no token, or with a token shorter
        than MIN_TOKEN_LENGTH, unless explicitly allowed.

        Raises:
            InvalidInputError: the bind would expose an unauthenticated API, or one whose
                token can be guessed (names the token's place, never its text).
        """
        if self.allow_insecure or is_loopback(host):
            return
        if not self.api_tokens:
            raise InvalidInputError(
                f"refusing to serve on {host} without LANEWAY_API_TOKENS; "
                "set LANEWAY_ALLOW_INSECURE=1 to allow it"
            )
        if short := self.short_tokens():
            places = ", ".join(str(n) for n in short)
            raise InvalidInputError(
                f"refusing to serve on {host}: LANEWAY_API_TOKENS token {places} is shorter"
                f" than {MIN_TOKEN_LENGTH} characters, which can be guessed; use long random"
                " tokens (openssl rand -hex 32), or set LANEWAY_ALLOW_INSECURE=1 to allow it"
            )
