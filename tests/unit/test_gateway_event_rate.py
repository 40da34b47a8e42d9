"""The backend event rate: a tenant's moving window is waited on (never refused), another
tenant's window is its own, and a connection held in every window past the grace is flooding
while a burst followed by a pause is not. The rate's defaults come from settings and the
tenant document's `limits.backendEventsPerSecond` overrides them."""

from __future__ import annotations

import asyncio
import time

import pytest

from keel_stream.api.tenant_limits import TenantLimits
from keel_stream.gateway.event_rate import EventFlow, EventLimits, EventRate
from keel_stream.settings import KeelSettings
from keel_stream.tenancy.document import TenantConfig


async def test_a_tenant_over_its_event_rate_waits_for_the_window() -> None:
    rate = EventRate()
    started = time.monotonic()
    waits = [await rate.take("acme", 20) for _ in range(30)]
    elapsed = time.monotonic() - started
    assert waits[:20] == [0.0] * 20
    assert waits[20] > 0
    assert elapsed >= 0.9, "the 21st event waited for the first to leave the window"


async def test_another_tenants_window_is_its_own() -> None:
    rate = EventRate()
    for _ in range(5):
        await rate.take("acme", 5)
    held = asyncio.create_task(rate.take("acme", 5))
    assert await asyncio.wait_for(rate.take("beta", 5), 0.1) == 0.0
    assert not held.done(), "acme waits while beta is let in"
    assert await held > 0


async def test_a_connection_held_in_every_window_past_the_grace_is_flooding() -> None:
    flow = EventFlow(EventRate(), grace_s=1.5)
    flooded = None
    started = time.monotonic()
    while flooded is None:
        flooded = await flow.admit("acme", 50)
        assert time.monotonic() - started < 5, "a flood was never noticed"
    assert flooded > 1.5
    assert flow.held_after(started)


async def test_a_burst_then_a_pause_is_not_a_flood() -> None:
    flow = EventFlow(EventRate(), grace_s=2.0)
    for _ in range(2):
        for _ in range(60):  # a burst over the window: held to it for one second
            assert await flow.admit("acme", 50) is None
        await asyncio.sleep(1.1)  # the backend pauses for a whole window
    assert await flow.admit("acme", 50) is None
    assert not flow.held_after(time.monotonic())


def test_the_event_rate_defaults_come_from_settings_and_the_document_overrides(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KEEL_TENANT_BACKEND_EVENTS_PER_S", "70")
    monkeypatch.setenv("KEEL_BACKEND_FLOOD_GRACE_S", "12.5")
    limits = TenantLimits.from_settings(KeelSettings())
    assert (limits.backend_events_per_second, limits.backend_flood_grace_s) == (70, 12.5)
    document = TenantConfig.model_validate({"limits": {"backendEventsPerSecond": 9}})
    assert limits.overridden(document.limits).backend_events_per_second == 9
    default = KeelSettings.model_fields["tenant_backend_events_per_s"].default
    assert TenantLimits().backend_events_per_second == default == EventLimits().per_second
