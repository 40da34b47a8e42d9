"""The `limits` part of the tenant configuration document: the tenant's own API bounds.

    "limits": {"maxStreams": 50, "maxStreamsPerKey": 20, "maxInFlight": 40,
               "maxInFlightPerKey": 20, "requestsPerSecond": 100, "sessionsPerMinute": 60,
               "inputsPerSecond": 10, "backendEventsPerSecond": 50}

Each field is optional: one left out keeps the operator's default (KEEL_TENANT_* settings). The
`backendEventsPerSecond` bounds the events the tenant's external backends may have committed a
second (the gateway reads no faster; docs/external.md#event-floods). The document is the
operator's (`keel-stream tenants config set`), so an override may raise a bound
as well as lower it; the process's own connection cap still holds above every tenant's.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = ["LimitsSpec"]

_Bound = Annotated[int, Field(ge=1, le=1_000_000)]


class LimitsSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, alias_generator=to_camel)

    max_streams: _Bound | None = None
    max_streams_per_key: _Bound | None = None
    max_in_flight: _Bound | None = None
    max_in_flight_per_key: _Bound | None = None
    requests_per_second: _Bound | None = None
    sessions_per_minute: _Bound | None = None
    inputs_per_second: _Bound | None = None
    backend_events_per_second: _Bound | None = None
