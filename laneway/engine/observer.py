"""What a running engine tells an observer: claims, steps, operations and outcomes, and what its
upkeep did (instances pruned, event partitions added and retired, rounds that failed). No I/O.

Owns the hook interface only. laneway/metrics.py counts these for Prometheus; with no observer
given, the engine calls the no-op one, whose methods do nothing, so the hot path pays one
method call per event and nothing more.
"""

from collections.abc import Sequence
from typing import Literal, Protocol, get_args

from laneway.model import InstanceRecord, Transition

# The upkeep steps that can fail on their own (engine/upkeep.py), as /metrics labels them.
UpkeepTask = Literal["unregistered", "prune", "partitions", "queue_history"]
UPKEEP_TASKS: tuple[UpkeepTask, ...] = get_args(UpkeepTask)


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

    def pruned(self, count: int, behind: bool) -> None:
        """A retention batch deleted `count` finished instances; `behind` when it came back
        full, so more past retention are left (its sweep goes on, or comes back soon)."""
        ...

    def partitions_added(self, count: int) -> None:
        """An upkeep round added `count` event partitions ahead (possibly none)."""
        ...

    def partitions_retired(self, count: int) -> None:
        """An upkeep round dropped `count` emptied event partitions (possibly none)."""
        ...

    def upkeep_failed(self, task: UpkeepTask) -> None:
        """An upkeep step raised; it was logged and is tried again at its next round."""
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

    def pruned(self, count: int, behind: bool) -> None:
        pass

    def partitions_added(self, count: int) -> None:
        pass

    def partitions_retired(self, count: int) -> None:
        pass

    def upkeep_failed(self, task: UpkeepTask) -> None:
        pass
