"""The store's failures (asyncpg's errors are translated at the store's seam)."""

from __future__ import annotations

from keel_stream.errors.base import KeelError

__all__ = [
    "MigrationDrift",
    "MigrationFailed",
    "ProjectionBehind",
    "StoreError",
    "StoreUnavailable",
]


class StoreError(KeelError):
    """The store failed; the transaction was rolled back and nothing was committed."""

    code = "store_error"


class StoreUnavailable(StoreError):
    """The database could not be reached or dropped the connection; retry with the same key."""

    code = "store_unavailable"
    retriable = True


class ProjectionBehind(StoreError):
    """The read model had not reached the requested seq by the deadline; ask again."""

    code = "projection_behind"
    retriable = True


class MigrationFailed(StoreError):
    """A migration file failed; it and every later file were not applied."""

    code = "migration_failed"


class MigrationDrift(StoreError):
    """A migration file that was applied has since been changed."""

    code = "migration_drift"
