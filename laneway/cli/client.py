"""What the instance subcommands talk to: a Client, over the server's GraphQL API or the database.

Owns the GraphQL documents the CLI sends, the Client protocol both ways implement (remote.py
over HTTP and websockets, local.py in-process against the database) and how an error's
`extensions.code` becomes an exit code. Prints nothing.
"""

import socket
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from laneway.errors import DatabaseNewerError, LanewayError, MigrationsPendingError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_MIGRATIONS_PENDING = 3  # the database lacks this release's migrations; only serve, worker
# and migrate apply them (an older release may still run there: docs/deploying.md#upgrading)
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command that Ctrl-C stopped
EXIT_OUTPUT_CLOSED = 141  # 128 + SIGPIPE: the reader of stdout went away (`| head -2`)

# The plain fields of WorkflowInstanceStatus in schema order, then waitingReason: what
# `laneway status --json` has always printed (tests and scripts read it).
INSTANCE_FIELDS = """
  instanceID name queue status attempts lastError createdAt updatedAt priority runAfter
  params result parentID stage checkpoint progress message concurrencyKey version
  checkpointInputSchema waitingReason { code message until }
"""
EVENT_FIELDS = "eventID type instanceID name status at attempt error stage checkpoint signal"

STATUS = f"query ($id: ID!) {{ workflowInstance(instanceID: $id) {{ {INSTANCE_FIELDS} }} }}"
PROGRESS = "query ($id: ID!) { workflowInstance(instanceID: $id) { status progress message } }"
# The newest event of an instance when `watch --instance` starts: a terminal event before it
# was superseded (a retry ran the instance again), so it does not end the watch.
LAST_EVENT = """query ($id: ID!) {
  workflowInstance(instanceID: $id) { events(limit: 1) { eventID } }
}"""
ENQUEUE = """
mutation ($name: String!, $params: JSON, $queue: String, $priority: Int, $delayMs: Float,
          $idempotencyKey: String, $singletonKey: String, $concurrencyKey: String,
          $version: String) {
  enqueueWorkflow(name: $name, params: $params, queue: $queue, priority: $priority,
                  delayMs: $delayMs, idempotencyKey: $idempotencyKey,
                  singletonKey: $singletonKey, concurrencyKey: $concurrencyKey,
                  version: $version) {
    instanceID created
  }
}"""
CANCEL = "mutation ($id: ID!) { action: cancelWorkflow(instanceID: $id) { instanceID status } }"
RETRY = "mutation ($id: ID!) { action: retryWorkflow(instanceID: $id) { instanceID status } }"
RESUME = """mutation ($id: ID!, $input: JSON) {
  action: resumeWorkflow(instanceID: $id, input: $input) { instanceID status }
}"""
SIGNAL = """mutation ($id: ID!, $name: String!, $payload: JSON, $idempotencyKey: String) {
  signalWorkflow(instanceID: $id, name: $name, payload: $payload,
                 idempotencyKey: $idempotencyKey) {
    signalID accepted instance { status }
  }
}"""
WORKFLOWS = "{ workflows { name queue kind stages description version versions } }"
QUEUE_FIELDS = """
  name concurrency ratePerMinute keyConcurrency keyRatePerMinute paused settingsSource
  counts { pending running paused waiting completed failed cancelled }
"""
QUEUES = f"{{ queues {{ {QUEUE_FIELDS} }} }}"
EVENTS = f"""subscription ($id: ID, $after: ID) {{
  workflowEvents(instanceID: $id, afterEventID: $after) {{ {EVENT_FIELDS} }}
}}"""

# What each `extensions.code` means for the exit status: 1 for "it is not so" (unknown, in
# the wrong status, the server cannot serve now), 2 for "you asked wrongly".
EXIT_CODES = {
    "NOT_FOUND": EXIT_FAILED,
    "CONFLICT": EXIT_FAILED,
    "BAD_USER_INPUT": EXIT_USAGE,
    "GRAPHQL_VALIDATION_FAILED": EXIT_USAGE,
    "GRAPHQL_PARSE_FAILED": EXIT_USAGE,
    "OPERATION_RESOLUTION_FAILURE": EXIT_USAGE,
    "BAD_REQUEST": EXIT_USAGE,
    "UNAUTHENTICATED": EXIT_USAGE,
    "FORBIDDEN": EXIT_USAGE,
}

# Codes of a request that was refused before anything of it ran: it changed nothing. Any other
# failure of an action (TIMEOUT, SERVICE_UNAVAILABLE, a masked error, an answer lost on the
# way) may come after part of it was done.
REFUSED_CODES = frozenset(
    {
        "BAD_USER_INPUT",
        "GRAPHQL_PARSE_FAILED",
        "GRAPHQL_VALIDATION_FAILED",
        "OPERATION_RESOLUTION_FAILURE",
        "BAD_REQUEST",
        "UNAUTHENTICATED",
        "FORBIDDEN",
        "RATE_LIMITED",
    }
)

JSONObject = dict[str, Any]


def database_error(exc: BaseException) -> tuple[str, int] | None:
    """The one line and exit code for an error of reaching or entering the database (a URL
    that is not one, or whose options the server refuses: 2; a server that cannot be reached,
    a database or role it does not have, a password it refuses, a privilege the role lacks,
    no connection or resource left for it, a session it ended at its start, a database a newer
    Laneway migrated: 1; a database that lacks this release's migrations, which a command
    other than serve, worker and migrate does not apply: 3), or None for any other error."""
    if isinstance(exc, DatabaseNewerError):
        return str(exc), EXIT_FAILED
    if isinstance(exc, MigrationsPendingError):
        return migrations_pending(exc), EXIT_MIGRATIONS_PENDING
    if isinstance(exc, LanewayError):
        return None  # not the database's: said as it is
    import asyncpg  # here, once a command failed: `--url` commands never load the driver

    if isinstance(exc, asyncpg.ClientConfigurationError):
        return f"DATABASE_URL is not a PostgreSQL URL it can use: {exc}", EXIT_USAGE
    if isinstance(exc, asyncpg.InsufficientPrivilegeError):
        # A role that only runs Laneway: pending migrations, or a grant it was not given.
        return (
            f"cannot use the database: {exc} (migrations are applied by the schema's owner;"
            " the grants a role that runs Laneway needs are in docs/deploying.md)",
            EXIT_FAILED,
        )
    unreachable = (
        ConnectionError,
        socket.gaierror,
        TimeoutError,
        asyncpg.PostgresConnectionError,
        asyncpg.CannotConnectNowError,
        asyncpg.InterfaceError,
        asyncpg.InvalidCatalogNameError,  # no such database
        asyncpg.InvalidAuthorizationSpecificationError,  # no such role, or a wrong password
        asyncpg.InsufficientResourcesError,  # too many connections (for the role), disk full
    )
    if isinstance(exc, TimeoutError) and not str(exc):  # a connect that got no answer
        return "cannot use the database: it did not answer in time (TimeoutError)", EXIT_FAILED
    if isinstance(exc, unreachable):
        return f"cannot use the database: {str(exc) or type(exc).__name__}", EXIT_FAILED
    if isinstance(exc, asyncpg.PostgresError) and "FATAL" in (exc.severity_en, exc.severity):
        # FATAL ends the session: here, its start, refused (Laneway's own statements fail
        # with ERROR). A value (22), a name or its syntax (42) or a setting that cannot change
        # now (55) is an option of the URL's (?options=-c ...) that the server will not take.
        if str(exc.sqlstate or "").startswith(("22", "42", "55")):
            return f"the database refused DATABASE_URL's options: {exc}", EXIT_USAGE
        return f"cannot use the database: {exc}", EXIT_FAILED
    return None


def migrations_pending(exc: MigrationsPendingError, database: str | None = None) -> str:
    """The one line for a database that lacks this release's migrations: what to do, and
    which database it is (`database`, as local.py describes it; None: not known here). A
    newcomer whose shell has no DATABASE_URL met the embedded one, and must migrate that."""
    if exc.fresh:
        advice = "run `laneway migrate` first (serve and worker also migrate at start)"
    else:
        advice = (
            "while the previous release runs, ask its server instead (--url BASE; `laneway"
            " preflight --url BASE` checks a deploy there); to upgrade, stop that release's"
            " processes, then run `laneway migrate` (docs/deploying.md#upgrading)"
        )
    which = f" ({database})" if database else ""
    return f"{exc}{which}: {advice}"


class CommandError(LanewayError):
    """The command could not do what was asked; `exit_code` is what `laneway` exits with,
    `code` the `extensions.code` of the API error it stands for (None: not an API error),
    `retry_after` the seconds the server asked to wait before trying again (Retry-After), and
    `changed` how many instances a bulk action the server stopped at its time limit changed
    (TIMEOUT with `matched` and `changed`; None: not known)."""

    def __init__(
        self,
        message: str,
        exit_code: int = EXIT_FAILED,
        *,
        code: str | None = None,
        retry_after: float | None = None,
        changed: int | None = None,
    ) -> None:
        self.exit_code = exit_code
        self.code = code
        self.retry_after = retry_after
        self.changed = changed
        super().__init__(message)


class UnreachableError(CommandError):
    """The server could not be reached: the request was never sent, so nothing of it ran."""


def raise_for_errors(errors: object, where: str, *, retry_after: float | None = None) -> None:
    """Raise the first GraphQL error of `errors` (an answer's: a list of error objects, though
    a server that is not Laneway may send anything, read as well as it can be) as a
    CommandError with the exit code its code means (and `retry_after`, the Retry-After).

    Raises:
        CommandError: there is an error.
    """
    if not errors:
        return
    first = errors[0] if isinstance(errors, Sequence) and not isinstance(errors, str) else errors
    if not isinstance(first, Mapping):
        first = {"message": str(first)}
    extensions = first.get("extensions")
    code = extensions.get("code") if isinstance(extensions, Mapping) else None
    message = str(first.get("message") or "the request failed")
    changed, matched = (
        (extensions.get("changed"), extensions.get("matched"))
        if isinstance(extensions, Mapping)
        else (None, None)
    )
    counted = isinstance(changed, int) and isinstance(matched, int)
    if code == "TIMEOUT" and counted:  # a bulk action stopped between its batches
        message = (
            f"{where} stopped it at its time limit (LANEWAY_OPERATION_TIMEOUT) after it"
            f" changed {changed} of the {matched} instances it matched"
        )
    elif code == "UNAUTHENTICATED":
        message = f"{where} needs a token: pass --token TOKEN or set LANEWAY_TOKEN"
    elif code == "FORBIDDEN":
        message = f"{where} refused the token: {message}"
    elif code == "TIMEOUT":
        message = f"{where} stopped it at its time limit (LANEWAY_OPERATION_TIMEOUT): {message}"
    elif code in ("SERVICE_UNAVAILABLE", "RATE_LIMITED"):
        message = f"{where} cannot serve this now: {message}"
    raise CommandError(
        message,
        EXIT_CODES.get(str(code), EXIT_FAILED),
        code=str(code) if code else None,
        retry_after=retry_after,
        changed=changed if counted and isinstance(changed, int) else None,
    )


class Client(Protocol):
    """Runs the CLI's GraphQL documents: against a server (--url) or the database."""

    @property
    def where(self) -> str:
        """What it talks to, for messages ("the server at http://…", "the database")."""
        ...

    async def execute(self, document: str, **variables: object) -> JSONObject:
        """The `data` of one query or mutation.

        Raises:
            CommandError: the operation failed (with the exit code its error code means).
        """
        ...

    async def execute_long_running(self, document: str, **variables: object) -> JSONObject:
        """`execute` for a bulk action's change, one request however many instances it
        changes: it waits for the answer as long as the server works on it.

        Raises:
            CommandError: the operation failed (with the exit code its error code means).
        """
        ...

    def check_workflow(self, name: str) -> None:
        """Refuse, before enqueueing or scheduling it, a workflow name this client cannot know.

        Raises:
            CommandError: the name is not registered where it will be checked.
        """
        ...

    def follow(
        self, instance_id: str | None, after: str | None
    ) -> AbstractAsyncContextManager[AsyncIterator[JSONObject]]:
        """Events in commit order (WorkflowEvent fields), after `after` (None: from now on),
        of one instance or of all, as they happen."""
        ...
