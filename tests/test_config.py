"""Settings.from_env: every number is finite and in its range, every URL a PostgreSQL one;
a refusal names the variable (the CLI makes it one `laneway:` line, exit 2)."""

import json
import logging
import re
from pathlib import Path

import pytest

from laneway.api.graphql.schema import export_schema
from laneway.config import (
    KNOWN_VARIABLES,
    MIN_TOKEN_LENGTH,
    MISTAKEN_VARIABLES,
    Settings,
    unknown_variable_warning,
    unknown_variables,
)
from laneway.errors import InvalidInputError
from tests.test_cli import environment, laneway

NUMBERS = (
    "PORT",
    "LANEWAY_METRICS_PORT",
    "LANEWAY_LEASE_SECONDS",
    "LANEWAY_POLL_SECONDS",
    "LANEWAY_WORKER_CONCURRENCY",
    "LANEWAY_MAX_RECOVERIES",
    "LANEWAY_SHUTDOWN_GRACE",
    "LANEWAY_RETENTION_DAYS",
    "LANEWAY_STATEMENT_TIMEOUT",
    "LANEWAY_LOCK_TIMEOUT",
    "LANEWAY_IDLE_IN_TRANSACTION_TIMEOUT",
    "LANEWAY_POOL_SIZE",
    "LANEWAY_RATE_LIMIT",
    "LANEWAY_RATE_BURST",
    "LANEWAY_WS_HANDSHAKES_PER_MINUTE",
    "LANEWAY_WS_CONNECTIONS_PER_TOKEN",
    "LANEWAY_OPERATION_TIMEOUT",
    "LANEWAY_HEADER_TIMEOUT",
    "LANEWAY_MAX_CONNECTIONS",
)


@pytest.mark.parametrize("key", NUMBERS)
@pytest.mark.parametrize(
    # `1_0`, `٣٠` (Arabic-Indic digits) and `１０` were taken by float() (an outside audit).
    "raw",
    ["inf", "-inf", "nan", "1e400", "abc", "-1", "1_0", "٣٠", "１０", "0x10", "1 0"],
)
def test_a_number_that_is_not_finite_or_in_range_is_refused_by_name(key: str, raw: str) -> None:
    with pytest.raises(InvalidInputError, match=f"^{key} must be a number"):
        Settings.from_env({key: raw})


@pytest.mark.parametrize(
    ("key", "raw", "says"),
    [
        # Past what PostgreSQL's int-millisecond timeouts hold (it refused them at start-up).
        ("LANEWAY_STATEMENT_TIMEOUT", "3000000", "from 0 to 2,147,483"),
        ("LANEWAY_RETENTION_DAYS", "1e12", "from 0 to 36,500"),
        ("LANEWAY_LEASE_SECONDS", "0.1", "from 0.5 to 86,400"),
        ("PORT", "70000", "from 0 to 65,535"),
        ("LANEWAY_WORKER_CONCURRENCY", "0", "from 1 to 1,000,000"),
    ],
)
def test_a_number_out_of_its_range_names_the_range(key: str, raw: str, says: str) -> None:
    with pytest.raises(InvalidInputError, match=f"^{key} must be a number {says}, not '{raw}'"):
        Settings.from_env({key: raw})


@pytest.mark.parametrize("key", ["LANEWAY_ENGINE", "LANEWAY_OPEN_READS", "LANEWAY_GC_FREEZE"])
def test_an_on_off_word_that_is_not_one_names_the_words_taken(key: str) -> None:
    # An outside audit: it said "must be 0 or 1", though true/yes/on and false/no/off are taken.
    words = r"on \(1, true, yes, on\) or off \(0, false, no, off\), not '2'$"
    with pytest.raises(InvalidInputError, match=f"^{key} must be {words}"):
        Settings.from_env({key: "2"})


@pytest.mark.parametrize(
    "key", ["PORT", "LANEWAY_WORKER_CONCURRENCY", "LANEWAY_POOL_SIZE", "LANEWAY_METRICS_PORT"]
)
def test_a_count_or_a_port_must_be_whole(key: str) -> None:
    with pytest.raises(InvalidInputError, match=f"^{key} must be a whole number, not '10.5'"):
        Settings.from_env({key: "10.5"})


def test_numbers_in_range_are_taken_and_blank_means_the_default() -> None:
    settings = Settings.from_env(
        {
            "PORT": "1.5e3",
            "LANEWAY_METRICS_PORT": "9100",
            "LANEWAY_LEASE_SECONDS": "86400",
            "LANEWAY_STATEMENT_TIMEOUT": "2147483",
            "LANEWAY_WORKER_CONCURRENCY": " 7 ",
            "LANEWAY_POOL_SIZE": "",
        }
    )
    assert (settings.port, settings.metrics_port) == (1500, 9100)
    assert settings.lease_seconds == 86400.0
    assert settings.statement_timeout_seconds == 2147483.0
    assert settings.worker_concurrency == 7
    assert settings.pool_size == Settings().pool_size
    assert Settings.from_env({"LANEWAY_METRICS_PORT": " "}).metrics_port is None


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("mysql://root:secret@db/app", "must be a PostgreSQL URL, as in postgresql://"),
        ("host=db password=secret", "must be a PostgreSQL URL, as in postgresql://"),
        ("postgresql://u@[::1/db", "is not a valid URL: Invalid IPv6 URL"),
        ("postgresql://u:p@db:port/app", "'port' is not a port number"),
        # Out of range: it was tried, and said `[Errno 111] Connection refused` (exit 1).
        ("postgresql://u:p@db:99999/app", "port 99999 is not a port from 0 to 65535"),
        ("postgresql://u:p@db1:5432,db2:65536/app", "port 65536 is not a port from 0 to 65535"),
        ("postgresql://u:p@db:٥٤٣٢/app", "is not a port number"),
    ],
)
def test_a_database_url_that_is_not_a_postgresql_one_is_refused(url: str, says: str) -> None:
    with pytest.raises(InvalidInputError, match=r"^DATABASE_URL") as refused:
        Settings.from_env({"DATABASE_URL": url})
    assert says in str(refused.value)
    assert "secret" not in str(refused.value)  # a mistyped value may hold a password


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:p@db:5432/app",
        "postgres://db/app",
        "postgresql://u@[::1]:5432/app",
        "postgresql://u@db1:5432,db2:5433/app?target_session_attrs=read-write",
        "postgresql://postgres:@/postgres?host=/tmp/socket-dir",
    ],
)
def test_postgresql_urls_are_taken_as_they_are(url: str) -> None:
    assert Settings.from_env({"DATABASE_URL": url}).database_url == url


def test_an_owner_id_is_taken_up_to_what_application_name_holds() -> None:
    longest = "w" * 46
    assert len(f"laneway-listener-{longest}") == 63  # PostgreSQL's application_name keeps 63
    assert Settings.from_env({"LANEWAY_OWNER_ID": longest}).owner_id == longest
    assert Settings.from_env({"LANEWAY_OWNER_ID": "host-1:42:ab/c_d.e"}).owner_id == (
        "host-1:42:ab/c_d.e"
    )
    assert Settings.from_env({"LANEWAY_OWNER_ID": " "}).owner_id is None  # blank: generated


def test_an_owner_id_application_name_would_cut_is_refused_by_name() -> None:
    # It was taken, and PostgreSQL cut laneway-<role>-<id> at 63 bytes without a word.
    with pytest.raises(
        InvalidInputError,
        match=r"^LANEWAY_OWNER_ID must be at most 46 characters, not 47: .* cuts at 63 bytes$",
    ):
        Settings.from_env({"LANEWAY_OWNER_ID": "w" * 47})


@pytest.mark.parametrize("raw", ["wörker", "a b", "tab\there", "nul\x00"])
def test_an_owner_id_that_is_not_printable_ascii_is_refused_by_name(raw: str) -> None:
    with pytest.raises(InvalidInputError, match=r"^LANEWAY_OWNER_ID must be printable ASCII"):
        Settings.from_env({"LANEWAY_OWNER_ID": raw})


def test_api_tokens_are_taken_trimmed_and_one_no_client_can_send_is_refused_unquoted() -> None:
    settings = Settings.from_env({"LANEWAY_API_TOKENS": " reader-1 , w/x+y= ,"})
    assert settings.api_tokens == ("reader-1", "w/x+y=")
    # Taken, it refused every caller: a client cannot send `é` (or a space) in a bearer header.
    with pytest.raises(InvalidInputError) as raised:
        Settings.from_env({"LANEWAY_API_TOKENS": "reader-1,sécret"})
    assert str(raised.value) == (
        "LANEWAY_API_TOKENS must hold only visible ASCII characters, as a bearer token does"
        " (letters, digits and punctuation, without spaces or line breaks): token 2: its"
        " character 2 is not ASCII"
    )
    with pytest.raises(InvalidInputError, match=r"token 1: its character 4 is a space$"):
        Settings.from_env({"LANEWAY_API_TOKENS": "two words"})


def test_a_token_shorter_than_16_characters_is_refused_on_a_public_address_only() -> None:
    short, long = "x" * (MIN_TOKEN_LENGTH - 1), "y" * MIN_TOKEN_LENGTH
    assert MIN_TOKEN_LENGTH == 16
    settings = Settings.from_env({"LANEWAY_API_TOKENS": f"{long},{short}"})
    assert settings.short_tokens() == (2,)
    for host in ("0.0.0.0", "10.0.0.5", "::", ""):
        with pytest.raises(InvalidInputError, match=r"LANEWAY_API_TOKENS token 2 is shorter"):
            settings.check_bind(host)
    # On loopback it is served (with a warning from `serve`), and ALLOW_INSECURE says that a
    # public API may be weakly guarded on purpose, as it says it may be open.
    for host in ("127.0.0.1", "localhost", "::1"):
        settings.check_bind(host)
    Settings.from_env({"LANEWAY_API_TOKENS": short, "LANEWAY_ALLOW_INSECURE": "1"}).check_bind(
        "0.0.0.0"
    )
    Settings.from_env({"LANEWAY_API_TOKENS": long}).check_bind("0.0.0.0")


ROOT = Path(__file__).resolve().parents[1]
# A LANEWAY_ name as code writes it; and, in tests/, a read of one from the environment.
_NAME = re.compile(r"\bLANEWAY_[A-Z0-9_]*[A-Z0-9]\b")
_READ = re.compile(r"""(?:environ(?:\.get)?\(|environ\[|getenv\()\s*["'](LANEWAY_\w+)["']""")


def test_every_laneway_variable_the_package_names_is_known() -> None:
    # The list cannot go stale: a variable read anywhere in laneway/ is in it (the names it
    # tells a mistaken one by are the exception).
    named = {
        name
        for path in (ROOT / "laneway").rglob("*.py")
        for name in _NAME.findall(path.read_text())
    }
    assert named - set(MISTAKEN_VARIABLES) <= KNOWN_VARIABLES, sorted(named - KNOWN_VARIABLES)
    assert {"LANEWAY_TOKEN", "LANEWAY_FAULTS"} <= named  # read beside Settings


def test_every_laneway_variable_the_tests_read_is_known() -> None:
    read = {
        name for path in (ROOT / "tests").rglob("*.py") for name in _READ.findall(path.read_text())
    }
    assert "LANEWAY_TEST_DATABASE_URL" in read
    assert read <= KNOWN_VARIABLES, sorted(read - KNOWN_VARIABLES)


def test_unknown_laneway_variables_are_named_with_what_they_were_likely_meant_as() -> None:
    environ = {
        "LANEWAY_DATABASE_URL": "postgresql://x/y",
        "LANEWAY_POOLSIZE": "4",
        "LANEWAY_XYZZY": "1",
        "LANEWAY_DATABSE_URL": "postgresql://x/y",  # not LANEWAY_TEST_DATABASE_URL (an audit)
        "LANEWAY_POOL_SIZE": "4",
        "DATABASE_URL": "postgresql://x/y",
        "HOME": "/root",
    }
    assert unknown_variables(environ) == {
        "LANEWAY_DATABASE_URL": "DATABASE_URL",
        "LANEWAY_DATABSE_URL": "DATABASE_URL",
        "LANEWAY_POOLSIZE": "LANEWAY_POOL_SIZE",
        "LANEWAY_XYZZY": None,
    }
    # Names are case-sensitive: a variable in the wrong case is not read, and says so.
    assert unknown_variables(
        {"LANEWAY_database_url": "x", "laneway_workflows": "app", "Laneway_Pool_Size": "4"}
    ) == {
        "LANEWAY_database_url": "DATABASE_URL",
        "Laneway_Pool_Size": "LANEWAY_POOL_SIZE",
        "laneway_workflows": "LANEWAY_WORKFLOWS",
    }
    assert unknown_variable_warning("LANEWAY_POOLSIZE", "LANEWAY_POOL_SIZE") == (
        "LANEWAY_POOLSIZE is not a variable Laneway reads: it is ignored"
        " (did you mean LANEWAY_POOL_SIZE?)"
    )
    assert unknown_variable_warning("LANEWAY_XYZZY", None).endswith("it is ignored")


def test_from_env_logs_each_unknown_variable_as_a_warning_and_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="laneway.config"):
        settings = Settings.from_env({"LANEWAY_DATABASE_URL": "postgresql://x/y"})
    assert settings.database_url is None  # ignored, as said
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == "environment variable ignored"
    fields = vars(record)
    assert (fields["variable"], fields["did_you_mean"]) == ("LANEWAY_DATABASE_URL", "DATABASE_URL")


async def test_a_command_warns_of_an_unknown_variable_in_one_line_and_goes_on() -> None:
    env = environment(None, LANEWAY_DATABASE_URL="postgresql://nobody@127.0.0.1:1/none")
    code, out, err = await laneway("export-schema", env=env)
    assert (code, out) == (0, export_schema())
    assert err == (
        "laneway: warning: LANEWAY_DATABASE_URL is not a variable Laneway reads: it is ignored"
        " (did you mean DATABASE_URL?)\n"
    )


async def test_a_worker_logs_an_unknown_variable_as_a_warning_record() -> None:
    env = environment(
        "postgresql://nobody@127.0.0.1:1/none", LANEWAY_WORKFLOWS="", LANEWAY_POOLSIZE="4"
    )
    code, _, err = await laneway("worker", env=env)
    assert code == 2  # no workflows: it stops there, after reading its settings
    warning, refusal = err.splitlines()
    assert json.loads(warning) | {"time": None} == {
        "time": None,
        "level": "warning",
        "logger": "laneway.config",
        "message": "environment variable ignored",
        "variable": "LANEWAY_POOLSIZE",
        "did_you_mean": "LANEWAY_POOL_SIZE",
    }
    assert refusal.startswith("laneway: no workflows to run")
