"""HandlerContext: what a workflow handler receives, and the steps it returns.

Owns the handler-facing surface: identity, attempt, the mutable state, cancellation and
progress reporting. Does no I/O; the runner reads what the handler left here.
"""

import asyncio
from dataclasses import dataclass, field
from uuid import UUID

from app.model import JSONValue


@dataclass(frozen=True, slots=True)
class Next:
    """Go on with `action` (a handler name of the same workflow), passing it `params`."""

    action: str
    params: JSONValue = None


@dataclass(frozen=True, slots=True)
class Done:
    """End the instance as completed, optionally with a JSON result."""

    result: JSONValue = None


Step = Next | Done


class CancelledByRequestError(Exception):
    """Raised by `HandlerContext.raise_if_cancelled` once the instance was cancelled."""


@dataclass(slots=True, kw_only=True)
class HandlerContext:
    """The context one handler call receives.

    `state` is the instance's durable state: mutate it, and the engine checkpoints it after
    the handler returns. A failed attempt is retried with the state of the last checkpoint.
    """

    instance_id: UUID
    name: str
    action: str
    attempt: int
    max_attempts: int
    params: JSONValue
    state: dict[str, JSONValue]
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    progress: float | None = None
    message: str | None = None

    @property
    def is_cancelled(self) -> bool:
        """True once a cancel was requested; the handler task is also cancelled."""
        return self.cancelled.is_set()

    def raise_if_cancelled(self) -> None:
        """Stop here if the instance was cancelled."""
        if self.cancelled.is_set():
            raise CancelledByRequestError(f"instance {self.instance_id} was cancelled")

    def report(self, *, progress: float | None = None, message: str | None = None) -> None:
        """Record progress (0..1) and a status line, saved with the next checkpoint."""
        if progress is not None:
            if not 0.0 <= progress <= 1.0:
                raise ValueError("progress must be between 0 and 1")
            self.progress = progress
        if message is not None:
            self.message = message[:500]
