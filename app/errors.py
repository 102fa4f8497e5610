"""Errors Laneway raises on purpose.

LanewayError
├── NotFoundError        unknown instance, schedule, queue or workflow
├── InvalidInputError    params rejected, bad interval or cron, limit out of range
├── ConflictError        action not allowed in the instance's current status
└── LeaseLostError       a runner's write was fenced out (internal, never user-facing)

Knows nothing of GraphQL or HTTP: app/api maps each class to an `extensions.code`.
"""

from uuid import UUID


class LanewayError(Exception):
    """Laneway could not do what was asked."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.__doc__)


class NotFoundError(LanewayError):
    """Nothing by that name or id exists."""


class InvalidInputError(LanewayError):
    """The input was rejected."""


class ConflictError(LanewayError):
    """The instance is not in a status that allows this action."""

    def __init__(self, instance_id: UUID, status: str, action: str) -> None:
        self.instance_id, self.status, self.action = instance_id, status, action
        super().__init__(f"cannot {action} instance {instance_id} while it is {status}")


class LeaseLostError(LanewayError):
    """This runner no longer holds the instance's lease; its write was not applied."""

    def __init__(self, instance_id: UUID) -> None:
        self.instance_id = instance_id
        super().__init__(f"lease on instance {instance_id} was lost")
