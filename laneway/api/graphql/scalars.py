"""How values leave the GraphQL API: the JSON scalar, and times as milliseconds.

Owns the two conventions every type module shares: JSON values pass through as they are, and a
moment is a Float of milliseconds since the Unix epoch. Defines no GraphQL type of its own.
"""

from datetime import datetime

import strawberry

JSON = strawberry.scalars.JSON


def millis(moment: datetime) -> float:
    """Milliseconds since the Unix epoch."""
    return moment.timestamp() * 1000.0
