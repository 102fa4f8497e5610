"""Events: LISTEN/NOTIFY doorbells turned into per-subscriber streams replayed from the table."""

from laneway.events.hub import EventFilter, EventHub, EventSelection, EventStream

__all__ = ["EventFilter", "EventHub", "EventSelection", "EventStream"]
