"""The Store's deploy area: what is in flight per workflow version, for the deploy preflight.

Owns the two reads of laneway/store/queries/deploys.py; the judgement of what the new code
could not run is the engine's (laneway/engine/preflight.py).
"""

from collections.abc import Sequence
from uuid import UUID

from laneway.model import InFlight
from laneway.store import queries
from laneway.store.base import StoreBase


class DeployStore(StoreBase):
    """Unfinished instances by (name, version) and by the actions they may run next."""

    async def in_flight(self) -> list[InFlight]:
        """Per (name, version): its unfinished instances (`action` None), and per action one of
        them may run next, how many may."""
        async with self._acquire() as conn:
            rows = await conn.fetch(queries.IN_FLIGHT_ACTIONS)
        return [
            InFlight(
                name=row["name"],
                version=row["version"],
                action=None if row["whole"] else row["action"],
                instances=row["instances"],
            )
            for row in rows
        ]

    async def in_flight_sample(
        self, name: str, version: str, action: str | None, limit: int
    ) -> Sequence[UUID]:
        """The newest unfinished instances of (name, version), those that may run `action` next
        where it is given."""
        async with self._acquire() as conn:
            rows = await conn.fetch(queries.IN_FLIGHT_SAMPLE, name, version, action, limit)
        return [row["instance_id"] for row in rows]
