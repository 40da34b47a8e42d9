"""De-duplication by (tenant, session, seq): what every consumer of keel.events.v1 needs."""

from __future__ import annotations

__all__ = ["SeqDeduplicator"]


class SeqDeduplicator:
    """Admits each session's events once, in seq order.

    The relay publishes at least once, so a record can arrive twice (after a relay crash) and,
    rarely, a later seq can arrive before an earlier one was re-sent. A record at or below the
    session's last admitted seq is a duplicate. A record past a gap is admitted too but the gap
    is reported, so a consumer that needs every event can fetch the missing seqs from the
    ledger (GET /v1/sessions/{id}/events?after=...).
    """

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], int] = {}

    def admit(self, tenant: str, session: str, seq: int) -> bool:
        """True the first time a (tenant, session, seq) beyond the session's last is seen."""
        key = (tenant, session)
        if seq <= self._last.get(key, 0):
            return False
        self._last[key] = seq
        return True
