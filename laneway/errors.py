"""Errors Laneway raises on purpose.

LanewayError
├── NotFoundError        unknown instance, schedule or queue
├── InvalidInputError    params rejected, unknown workflow, bad interval or cron, limit out of range
│   ├── InputRejectedError  a resume's input failed its checkpoint's input schema
│   └── OwnerIdInUseError   an engine's owner id is held by another live process (at start)
├── ConflictError        action not allowed in the instance's current status
├── BulkStoppedError     a bulk action stopped at its time, part done (run it again)
├── LeaseLostError       a runner's write was fenced out (internal, never user-facing)
├── MigrationsMissingError  the installation carries no migration files (at migrate or start)
├── MigrationsPendingError  the database lacks migrations of this Laneway, left unapplied (internal)
├── MigrationFailedError  the database refused a migration's SQL (at migrate or start)
└── DatabaseNewerError   a newer Laneway migrated the database (before start, or while running)

Knows nothing of GraphQL or HTTP: laneway/api maps each class to an `extensions.code`.
`raised_alone` lets an error raised in a block that runs the engine beside it come out as
itself, not in a TaskGroup's ExceptionGroup; `os_error_reason` is how an OSError Laneway
reports in one line (an address it cannot listen on) says why.
"""

import contextlib
import os
from collections.abc import Iterator
from uuid import UUID


@contextlib.contextmanager
def raised_alone() -> Iterator[None]:
    """Around a TaskGroup: a single error it raises comes out as itself, not in an
    ExceptionGroup (the error of the block it ran, or of its one task), so that a caller's
    `except TimeoutError:` around `engine.wait(...)` in `async with engine.running():`, or a
    test's assert there, sees what it expects. Several errors stay a group."""
    alone: BaseException | None = None
    try:
        yield
    except BaseExceptionGroup as group:
        if len(group.exceptions) != 1:
            raise
        alone = group.exceptions[0]
    if alone is not None:
        # Chained to what it was chained to, not to the group it came in (whose traceback
        # would come first, with this one inside it, then again after it).
        explicit = alone.__suppress_context__ or alone.__cause__ is not None
        raise alone from (alone.__cause__ if explicit else alone.__context__)


def os_error_reason(exc: OSError) -> str:
    """Why `exc` happened, in the C library's few words ("Address already in use").

    A host name that does not resolve fails with a negative getaddrinfo code, which
    os.strerror reads as "Unknown error -2": its own text is said instead ("Name or service
    not known"), without the "(while attempting to bind ...)" socket.create_server adds.
    """
    if exc.errno is not None and exc.errno > 0:
        # Not exc.strerror: asyncio's bind errors put the address in it, which the caller says.
        return os.strerror(exc.errno)
    if exc.strerror:
        return exc.strerror.split(" (while attempting to bind", 1)[0]
    return str(exc)


def described(exc: BaseException) -> str:
    """`exc` as a log line's `error`: its type, then its text if it has one. Its text alone
    was "" for a TimeoutError (a heartbeat that timed out said `error=""`)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class LanewayError(Exception):
    """Laneway could not do what was asked."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.__doc__)

    def details(self) -> dict[str, object]:
        """What an API adds to the error's code (GraphQL `extensions`): nothing by default."""
        return {}


class NotFoundError(LanewayError):
    """Nothing by that name or id exists."""


class InvalidInputError(LanewayError):
    """The input was rejected."""


class InputRejectedError(InvalidInputError):
    """The input does not match the input schema; `problems` holds (JSON path, message) pairs,
    the most relevant first."""

    def __init__(self, message: str, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__(message)

    def details(self) -> dict[str, object]:
        return {
            "path": self.problems[0][0],
            "problems": [{"path": path, "message": message} for path, message in self.problems],
        }


class OwnerIdInUseError(InvalidInputError):
    """Another live process runs an engine with this owner id (LANEWAY_OWNER_ID).

    Refused at the engine's start, before its first heartbeat: both processes would write one
    row of the workers registry (listed as one process, counted as one by the waiting
    reasons, and removed by the first to stop while the other still runs). Their leases would
    stay safe (they are fenced by their epoch), but nothing else tells them apart. The holder
    is named by `host`, `pid` and `seen_seconds_ago`, its last heartbeat's age.
    """

    def __init__(self, owner_id: str, *, host: str, pid: int, seen_seconds_ago: float) -> None:
        self.owner_id = owner_id
        self.host = host
        self.pid = pid
        self.seen_seconds_ago = seen_seconds_ago
        super().__init__(
            f"refusing to start: owner id {owner_id!r} is held by a live process (host {host},"
            f" pid {pid}, last seen {max(seen_seconds_ago, 0.0):.1f} s ago); give each process"
            " its own LANEWAY_OWNER_ID, or leave it unset"
        )


class ConflictError(LanewayError):
    """The instance is not in a status that allows this action."""

    def __init__(
        self, instance_id: UUID, status: str, action: str, *, reason: str | None = None
    ) -> None:
        self.instance_id, self.status, self.action = instance_id, status, action
        message = f"cannot {action} instance {instance_id} while it is {status}"
        super().__init__(f"{message}: {reason}" if reason else message)


class BulkStoppedError(LanewayError):
    """A bulk action stopped at the time it was given (the HTTP operation's deadline) before it
    had walked all it matched. What it changed stays changed; the same call again changes the
    rest. `details()` gives both counts (the API's TIMEOUT error carries them)."""

    def __init__(self, *, matched: int, changed: int) -> None:
        self.matched = matched
        self.changed = changed
        super().__init__(
            f"stopped at the operation's time limit after changing {changed} of the {matched}"
            " instances it matched; the same call again changes the rest"
        )

    def details(self) -> dict[str, object]:
        return {"matched": self.matched, "changed": self.changed}


class LeaseLostError(LanewayError):
    """This runner no longer holds the instance's lease; its write was not applied."""

    def __init__(self, instance_id: UUID) -> None:
        self.instance_id = instance_id
        super().__init__(f"lease on instance {instance_id} was lost")


class StepWriteRefusedError(LanewayError):
    """The database refused the write of a step's outcome (its checkpoint, result or failure)
    for what the write held, not because it went away: the attempt fails instead, retried as
    the workflow's policy says, and its slot is free at once."""


class MigrationsMissingError(LanewayError):
    """This Laneway installation carries no migration files, so it cannot create its schema."""

    def __init__(self, package: str) -> None:
        self.package = package
        super().__init__(
            f"no migration files found in the package {package!r}: this Laneway installation is"
            " incomplete (reinstall it from a wheel or the repository)"
        )


class DatabaseNewerError(LanewayError):
    """The database holds migrations this Laneway does not ship: a newer release migrated it.

    Refused at start and by `migrate`, before anything runs: a newer migration may have
    replaced functions this code calls by their old signatures, so its every write would
    fail and each instance it ran would burn its attempts until it failed for good. Found
    while a process runs (Store.newer_release), it stops the engine, and the API refuses
    every operation with it.
    """

    def __init__(self, unknown: list[str]) -> None:
        self.unknown = unknown
        super().__init__(
            f"the database was migrated by a newer Laneway: it has migrations this one does not"
            f" ship ({', '.join(unknown)}); run the newer release (or upgrade this"
            f" installation), not this one"
        )


class MigrationFailedError(LanewayError):
    """The database refused the SQL of a migration as it was applied (`laneway migrate`, or
    `serve` and `worker` at start). Each migration is applied in a transaction of its own, so
    nothing of this one is left, and those before it stay applied. `reason` is the database's
    error, with its class name (DuplicateTableError: its schema holds what the migration
    makes, though it is not recorded as applied)."""

    def __init__(self, migration: str, reason: str) -> None:
        self.migration, self.reason = migration, reason
        super().__init__(
            f"migration {migration} failed, and nothing of it was applied (those before it"
            f" stay applied): {reason}"
        )


class MigrationsPendingError(LanewayError):
    """The database lacks migrations this Laneway ships, and what was asked does not migrate.

    Raised by the commands that do not migrate (everything but serve, worker and migrate) on a
    database an older release migrated: applying the migrations there would change the schema
    under that release's processes, which stop at their next heartbeat. `pending` names the
    migrations, in order; `fresh` says the database has no Laneway schema at all.
    """

    def __init__(self, pending: list[str], *, fresh: bool) -> None:
        self.pending = pending
        self.fresh = fresh
        if fresh:
            message = "the database has no Laneway schema yet, and this does not create it"
        else:
            shown = ", ".join(pending) if len(pending) <= 3 else f"{pending[0]} … {pending[-1]}"
            message = (
                f"migrations are pending: the database's schema is older than this Laneway's"
                f" (it lacks {len(pending)} of the migrations this release ships: {shown}),"
                f" and this does not migrate it"
            )
        super().__init__(message)
