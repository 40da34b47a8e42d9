"""Driver errors a PostgreSQL failover produces leave the store as retriable StoreUnavailable."""

from __future__ import annotations

import asyncpg
import pytest

from keel_stream.errors import StoreError, StoreUnavailable
from keel_stream.store.driver_errors import translated


async def _raise_through(exc: BaseException) -> StoreError:
    with pytest.raises(StoreError) as caught:
        async with translated("commit"):
            raise exc
    return caught.value


@pytest.mark.parametrize(
    "exc",
    [
        # A write that reached a node demoted to standby (a switchover, a fenced old primary).
        asyncpg.ReadOnlySQLTransactionError("cannot execute INSERT in a read-only transaction"),
        # SQLSTATE class 08: the server reported the connection failed.
        asyncpg.ConnectionFailureError("connection failure"),
        asyncpg.exceptions.TargetServerAttributeNotMatched("no host is read-write"),
        ConnectionRefusedError(111, "Connect call failed"),
        asyncpg.ConnectionDoesNotExistError("terminating connection due to unexpected postmaster"),
    ],
)
async def test_a_failover_error_is_retriable_store_unavailable(exc: BaseException) -> None:
    error = await _raise_through(exc)
    assert isinstance(error, StoreUnavailable)
    assert error.retriable
    assert error.__cause__ is exc


async def test_a_refusal_by_the_database_stays_a_store_error() -> None:
    error = await _raise_through(asyncpg.UniqueViolationError("duplicate key"))
    assert not isinstance(error, StoreUnavailable)
    assert not error.retriable
