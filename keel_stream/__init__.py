"""keel-stream: the Keel Core event ledger on PostgreSQL and Kafka."""

from keel_stream.errors import KeelError
from keel_stream.kernel import CommitRequest, Event, Kind, LeaseToken, Submission
from keel_stream.store import Ledger, PostgresLedger

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
