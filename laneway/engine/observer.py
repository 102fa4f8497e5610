"""What a running engine tells an observer: claims, steps, operations and outcomes. No I/O.

Owns the hook interface only. laneway/metrics.py counts these for Prometheus; with no observer
given, the engine calls the no-op one, whose methods do nothing, so the hot path pays one
method call per event and nothing more.
"""

from collections.abc import Sequence
from typing import Protocol

from laneway.model import InstanceRecord, Transition


class EngineObserver(Protocol):
    """Hooks a process's engine calls as it works; each must be quick and must not raise."""

    def claimed(self, records: Sequence[InstanceRecord], lease_seconds: float) -> None:
        """A claim took these instances (possibly none), each starting an attempt now."""
        ...

    def step_finished(self, workflow: str, action: str, seconds: float) -> None:
        """A handler returned or raised after `seconds`."""
        ...

    def operation_finished(
        self, workflow: str, operation: str, status: str, seconds: float
    ) -> None:
        """A template operation's outcome was recorded after `seconds`."""
        ...

    def transitioned(self, transition: Transition) -> None:
        """This process changed an instance's status: completed, failed or cancelled as its
        status says, or retried when its status is pending again. Called by the process that
        wrote the change, and by it only: an attempt's outcome where it ran, a cancel where it
        was served, a lost lease where it was recovered, a wait's timeout where it woke."""
        ...


class NoObserver:
    """The observer of an engine nobody observes."""

    def claimed(self, records: Sequence[InstanceRecord], lease_seconds: float) -> None:
        pass

    def step_finished(self, workflow: str, action: str, seconds: float) -> None:
        pass

    def operation_finished(
        self, workflow: str, operation: str, status: str, seconds: float
    ) -> None:
        pass

    def transitioned(self, transition: Transition) -> None:
        pass
