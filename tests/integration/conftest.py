from __future__ import annotations

import pytest

from keel_stream.store import PostgresLedger


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration/" in str(item.path):
            item.add_marker(pytest.mark.integration)


@pytest.fixture
async def session(ledger: PostgresLedger) -> tuple[str, str]:
    """A tenant with one native session."""
    await ledger.create_tenant("acme")
    return "acme", await ledger.create_session("acme", "s1")
