"""Service heartbeats: one contract, PostgreSQL (the database's clock) and memory."""

from __future__ import annotations

import asyncio

import pytest

from keel_stream.heartbeats import beating
from keel_stream.store import Store
from keel_stream.store.service_heartbeats import MISSED_BEATS, ServiceHeartbeats, ServiceKind
from tests.contract.backends import InMemory, OnPostgres
from tests.support.wait import wait_until

SENDER, SCHEDULER = ServiceKind.HOOKS_SENDER, ServiceKind.TRIGGER_SCHEDULER
SHORT_S = 0.1


class ServiceHeartbeatsContract:
    @pytest.fixture
    def heartbeats(self, backend: Store) -> ServiceHeartbeats:
        return backend.service_heartbeats()

    async def test_a_service_runs_from_its_first_beat_until_it_ends(
        self, heartbeats: ServiceHeartbeats
    ) -> None:
        assert await heartbeats.running() == {}
        await heartbeats.beat(SENDER, "a", 60)
        await heartbeats.beat(SENDER, "b", 60)
        await heartbeats.beat(SENDER, "a", 60)
        await heartbeats.beat(SCHEDULER, "c", 60)
        assert await heartbeats.running() == {SENDER: 2, SCHEDULER: 1}
        await heartbeats.end(SENDER, "a")
        await heartbeats.end(SCHEDULER, "c")
        await heartbeats.end(SCHEDULER, "c")
        assert await heartbeats.running() == {SENDER: 1}

    async def test_a_service_that_stops_beating_stops_running_after_its_missed_beats(
        self, heartbeats: ServiceHeartbeats
    ) -> None:
        await heartbeats.beat(SENDER, "quick", SHORT_S)
        await heartbeats.beat(SCHEDULER, "slow", 60)
        assert await heartbeats.running() == {SENDER: 1, SCHEDULER: 1}

        async def only_the_slow_one() -> bool:
            return await heartbeats.running() == {SCHEDULER: 1}

        await wait_until(only_the_slow_one, MISSED_BEATS * SHORT_S + 5, "the quick one to go stale")
        await heartbeats.beat(SENDER, "quick", SHORT_S)
        assert await heartbeats.running() == {SENDER: 1, SCHEDULER: 1}, "a beat revives it"

    async def test_beating_keeps_the_row_fresh_and_removes_it_however_the_body_ends(
        self, heartbeats: ServiceHeartbeats
    ) -> None:
        async with beating(heartbeats, SENDER, SHORT_S):
            assert await heartbeats.running() == {SENDER: 1}, "counted from the start"
            await asyncio.sleep(MISSED_BEATS * SHORT_S * 2)  # long enough to go stale unbeaten
            assert await heartbeats.running() == {SENDER: 1}
        assert await heartbeats.running() == {}
        with pytest.raises(RuntimeError):
            async with beating(heartbeats, SCHEDULER, SHORT_S):
                raise RuntimeError("the service failed")
        assert await heartbeats.running() == {}


class TestServiceHeartbeatsOnPostgres(OnPostgres, ServiceHeartbeatsContract):
    pass


class TestServiceHeartbeatsInMemory(InMemory, ServiceHeartbeatsContract):
    pass
