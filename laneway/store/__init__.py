"""The store: all SQL, transactions, migrations and the embedded server."""

from laneway.store.store import Store, open_store

__all__ = ["Store", "open_store"]
