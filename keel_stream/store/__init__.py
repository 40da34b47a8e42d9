"""The store: the one door to PostgreSQL (migrations, the commit transaction, reads, run rows),
and the in-memory adapter that keeps the same rules."""

from keel_stream.store.connect import Pool, connect, create_pool, pooled
from keel_stream.store.memory import MemoryRuns, MemoryStore
from keel_stream.store.migrate import MigrationReport, migrate
from keel_stream.store.outbox import Outbox, PostgresOutbox
from keel_stream.store.postgres import PostgresLedger
from keel_stream.store.projection_state import PostgresProjectionStore, ProjectionStore
from keel_stream.store.protocol import (
    MAX_READ_LIMIT,
    Claim,
    ExternalMarkers,
    ExternalStatus,
    Heartbeat,
    Ledger,
    Metering,
    Runs,
    Settlement,
)
from keel_stream.store.runs import PostgresRuns

__all__ = [
    "MAX_READ_LIMIT",
    "Claim",
    "ExternalMarkers",
    "ExternalStatus",
    "Heartbeat",
    "Ledger",
    "MemoryRuns",
    "MemoryStore",
    "Metering",
    "MigrationReport",
    "Outbox",
    "Pool",
    "PostgresLedger",
    "PostgresOutbox",
    "PostgresProjectionStore",
    "PostgresRuns",
    "ProjectionStore",
    "Runs",
    "Settlement",
    "connect",
    "create_pool",
    "migrate",
    "pooled",
]
