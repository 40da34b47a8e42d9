"""keel-stream: the Keel Core event ledger on PostgreSQL and Kafka.

Importing the package (or its kernel) loads no database or broker driver: the store is imported
on first use of `Ledger` or `PostgresLedger`.
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
    "PostgresLedger",
    "Submission",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in ("Ledger", "PostgresLedger"):
        from keel_stream import store

        return getattr(store, name)
    raise AttributeError(f"module 'keel_stream' has no attribute {name!r}")
