"""What the API's trigger routes hold: the stores, the ledger's door and the bounds."""

from __future__ import annotations

from dataclasses import dataclass

from keel_stream.settings import KeelSettings
from keel_stream.store import Database
from keel_stream.store.triggers import TriggerStore
from keel_stream.store.triggers_schedule import TriggerScheduleStore

__all__ = ["TriggerService"]


@dataclass(frozen=True, slots=True)
class TriggerService:
    store: TriggerStore
    schedule: TriggerScheduleStore
    min_interval_s: int = 60

    @classmethod
    def create(cls, store: Database, settings: KeelSettings) -> TriggerService:
        return cls(
            store.triggers(max_per_tenant=settings.triggers_max_per_tenant),
            store.trigger_schedule(),
            settings.triggers_min_interval_s,
        )
