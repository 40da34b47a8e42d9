"""The PostgreSQL store: migrations, the commit transaction, reads."""

from keel_stream.store.connect import connect, create_pool, pooled
from keel_stream.store.migrate import MigrationReport, migrate
from keel_stream.store.postgres import MAX_READ_LIMIT, PostgresLedger
from keel_stream.store.protocol import ExternalMarkers, ExternalStatus, Ledger, Metering

__all__ = [
    "MAX_READ_LIMIT",
    "ExternalMarkers",
    "ExternalStatus",
    "Ledger",
    "Metering",
    "MigrationReport",
    "PostgresLedger",
    "connect",
    "create_pool",
    "migrate",
    "pooled",
]
