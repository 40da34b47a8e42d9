from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from keel_stream.store import PostgresLedger
from tests.support.workers import assert_one_summary_per_attempt


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration/" in str(item.path):
            item.add_marker(pytest.mark.integration)


@pytest.fixture
async def session(ledger: PostgresLedger) -> tuple[str, str]:
    """A tenant with one native session."""
    await ledger.create_tenant("acme")
    return "acme", await ledger.create_session("acme", "s1")


@pytest.fixture
async def one_summary_per_attempt(
    pool: asyncpg.Pool, ledger: PostgresLedger
) -> AsyncIterator[set[tuple[str, int]]]:
    """After the test: every settled attempt left exactly one run.finished (seed §1). The test
    adds (session, epoch) of attempts it drained on purpose (released, not settled)."""
    released: set[tuple[str, int]] = set()
    yield released
    await assert_one_summary_per_attempt(pool, ledger, released)
