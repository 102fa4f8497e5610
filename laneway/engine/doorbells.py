"""Doorbells: telling the NOTIFYs of this process's own claims and commits from news.

Owns the event ids this process's writes rang the doorbell with, and the doorbells that came
in while one of its writes was in flight (a commit's NOTIFY can reach the listener before the
commit's own answer reaches the committer). Such a doorbell is decided once the writes in
flight when it came are in: it is theirs, or it is news and wakes the claim loop.
"""

import collections
from collections.abc import Callable

OWN_DOORBELLS = 16  # own NOTIFYs not yet come back, at most (a slow listener's backlog)


class Doorbells:
    """Wakes the claim loop (`wake`) for every doorbell but those of its own writes."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self._wake = wake
        self._own: collections.deque[int] = collections.deque(maxlen=OWN_DOORBELLS)
        self._in_flight: set[int] = set()
        self._tokens = 0
        self._undecided: list[tuple[int, set[int]]] = []  # (event id, writes it waits for)

    def writing(self) -> int:
        """A write of this process's starts; returns its token for `wrote`."""
        self._tokens += 1
        self._in_flight.add(self._tokens)
        return self._tokens

    def wrote(self, token: int, *event_ids: int | None) -> None:
        """The write of `token` is in (or failed): the ids its doorbells rang with, if any."""
        self._in_flight.discard(token)
        for event_id in event_ids:
            if event_id is not None and event_id not in self._own:
                self._own.append(event_id)
        undecided, self._undecided = self._undecided, []
        for event_id, waiting_for in undecided:
            waiting_for.discard(token)
            if waiting_for and event_id not in self._own:
                self._undecided.append((event_id, waiting_for))
            else:
                self._decide(event_id)

    def rang(self, event_id: int | None) -> None:
        """A doorbell came (the last event id of its transaction)."""
        if event_id is not None and event_id not in self._own and self._in_flight:
            self._undecided.append((event_id, set(self._in_flight)))
        else:
            self._decide(event_id)

    def _decide(self, event_id: int | None) -> None:
        if event_id is not None and event_id in self._own:
            self._own.remove(event_id)  # this process's own write: it woke the loop already
        else:
            self._wake()
