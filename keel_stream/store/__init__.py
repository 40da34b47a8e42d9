"""The store: the one door to PostgreSQL (migrations, the commit transaction, reads, run rows),
and the in-memory backend that keeps the same rules.

Outside this package a backend is a `Store` (or, PostgreSQL's, a `Database`): `open_store` /
`opened_store` make the PostgreSQL one, `MemoryStore()` the memory one; repositories come from
it, typed by their ports. The pool and the adapter classes stay in here: they are exported for
the tests that test them (tests/test_quality.py keeps them out of the product's other packages).
"""

from keel_stream.store.backend import Database, Store
from keel_stream.store.connect import connect, create_pool, pooled
from keel_stream.store.memory import MemoryRuns, MemoryStore
from keel_stream.store.migrate import MigrationReport, migrate
from keel_stream.store.outbox import Outbox, PostgresOutbox
from keel_stream.store.postgres import PostgresLedger
from keel_stream.store.postgres_store import PostgresStore, open_store, opened_store, relay_outbox
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
    "Database",
    "ExternalMarkers",
    "ExternalStatus",
    "Heartbeat",
    "Ledger",
    "MemoryRuns",
    "MemoryStore",
    "Metering",
    "MigrationReport",
    "Outbox",
    "PostgresLedger",
    "PostgresOutbox",
    "PostgresProjectionStore",
    "PostgresRuns",
    "PostgresStore",
    "ProjectionStore",
    "Runs",
    "Settlement",
    "Store",
    "connect",
    "create_pool",
    "migrate",
    "open_store",
    "opened_store",
    "pooled",
    "relay_outbox",
]
