"""keel-stream: the Keel Core event ledger on PostgreSQL and Kafka.

Importing the package (or its kernel) loads no database or broker driver: the store is imported
on first use of `Ledger`, `Store`, `MemoryStore` or `open_store`.
"""

from typing import Any

from keel_stream.errors import KeelError
from keel_stream.kernel import CommitRequest, Event, Kind, LeaseToken, Submission

__all__ = [
    "CommitRequest",
    "Event",
    "KeelError",
    "Kind",
    "LeaseToken",
    "Ledger",
    "MemoryStore",
    "Store",
    "Submission",
    "open_store",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in ("Ledger", "MemoryStore", "Store", "open_store"):
        from keel_stream import store

        return getattr(store, name)
    raise AttributeError(f"module 'keel_stream' has no attribute {name!r}")
