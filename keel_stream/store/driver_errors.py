"""The adapter boundary: asyncpg errors become keel errors, chained, and go no further."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg

from keel_stream.errors import KeelError, StoreError, StoreUnavailable

__all__ = ["translated"]

_UNAVAILABLE = (
    OSError,
    asyncpg.ConnectionDoesNotExistError,
    asyncpg.CannotConnectNowError,
    asyncpg.TooManyConnectionsError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.InterfaceError,
    # A connection the server shut down mid-operation (seen during a fast shutdown): "cannot
    # switch to state 15; another operation is in progress".
    asyncpg.InternalClientError,
    # A failover: the server reports the connection failed (SQLSTATE class 08), or a write
    # reached a node that is (now) a standby: the writable node is found on reconnect.
    asyncpg.PostgresConnectionError,
    asyncpg.ReadOnlySQLTransactionError,
)


@asynccontextmanager
async def translated(action: str) -> AsyncIterator[None]:
    """Run a store action; any driver failure leaves as StoreUnavailable or StoreError."""
    try:
        yield
    except KeelError:
        raise
    except _UNAVAILABLE as exc:
        raise StoreUnavailable(f"{action}: database unavailable ({exc})") from exc
    except asyncpg.PostgresError as exc:
        raise StoreError(f"{action}: {exc.__class__.__name__}: {exc}") from exc
