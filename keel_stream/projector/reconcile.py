"""Healing tails that never arrived: compare idle sessions' ledger heads with the models.

What one tick reads is bounded, whatever the number of sessions:

- the sessions committed within the last `idle_s + window_s` seconds (an index range on
  sessions.last_committed_at): a tail lost on its way is healed on the first tick after the
  session has been idle for `idle_s`;
- one page (`sweep_page` sessions, in key order) of a rolling sweep over all sessions, so a
  session whose tail went missing longer ago (the projector was down for a while, a broker lost
  data) is still healed, within (sessions / sweep_page) ticks. Where the sweep goes on from is
  kept in memory (`Sweep`, one per Applier unless the caller passes its own): a restarted
  projector starts it over.

`find_behind` only reads; `heal` applies what was found through the applier, which locks the
sessions' states and never moves a state backwards, so a finding that went stale in between is
harmless. A caller can therefore look without holding off the live path and take its lock only
to heal; `reconcile` does both.

Sessions are healed one by one, each in transactions of its own: one that cannot be applied is
parked (keel_stream.store.projection_parked) and the others are healed all the same. A parked
session is not looked for again until its entry is due for another try.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from weakref import WeakKeyDictionary

from keel_stream.logs import get_logger
from keel_stream.projections.base import Projection
from keel_stream.projector.applier import Applier, BatchResult, live_generation
from keel_stream.projector.events import PARKED, PARKED_SESSIONS, describe, isolable
from keel_stream.store.projection_parked import ParkedSession
from keel_stream.store.projection_state import Behind, ProjectionStore

__all__ = ["Sweep", "find_behind", "heal", "reconcile"]

Key = tuple[str, str]
_START: Final[Key] = ("", "")
_SWEEPS: WeakKeyDictionary[Applier, Sweep] = WeakKeyDictionary()
_LOG: Final = get_logger("projector")


@dataclass(slots=True)
class Sweep:
    """The rolling sweep's position: the last session key it has checked."""

    after: Key = _START


def _everyone(tenant: str, session: str) -> bool:
    return True


async def find_behind(
    store: ProjectionStore,
    projections: Sequence[Projection[Any]],
    *,
    idle_s: float = 2.0,
    limit: int = 500,
    window_s: float = 60.0,
    sweep: Sweep | None = None,
    sweep_page: int = 1000,
    owns: Callable[[str, str], bool] = _everyone,
) -> dict[Key, int]:
    """Idle sessions some live projection misses events of, with the lowest seq applied
    (parked sessions not yet due for another try left out)."""
    live = await store.live_generations()
    parked = store.parked()
    held = await parked.held()
    counts = await parked.counts()
    upto = await store.sweep_end(sweep.after, sweep_page) if sweep is not None else None
    behind: dict[Key, int] = {}
    for projection in projections:
        generation = live_generation(live, projection.name)
        found: list[Behind] = await store.sessions_behind(
            projection.name, generation, idle_s=idle_s, limit=limit, within_s=idle_s + window_s
        )
        if sweep is not None and upto is not None:
            found += await store.sessions_behind_range(
                projection.name,
                generation,
                idle_s=idle_s,
                limit=limit,
                after=sweep.after,
                upto=upto,
            )
        PARKED_SESSIONS.labels(projection.name).set(counts.get((projection.name, generation), 0))
        for b in found:
            key = (b.tenant, b.session)
            if owns(*key) and (projection.name, generation, key) not in held:
                behind[key] = min(behind.get(key, b.applied), b.applied)
    if sweep is not None:
        sweep.after = _START if upto is None else upto
    return behind


async def heal(store: ProjectionStore, applier: Applier, behind: Mapping[Key, int]) -> BatchResult:
    """Apply, from the ledger, each session's events after the seq found applied, session by
    session. A session whose events cannot even be read and applied (what the applier does not
    park itself) is parked in every projection; a failure of the platform is raised."""
    applied = filled = parked = 0
    for (tenant, session), after in sorted(behind.items()):
        try:
            events = await store.ledger_range(tenant, session, after)
            if not events:
                continue
            result = await applier.apply_events(events)
        except Exception as exc:
            if not isolable(exc):
                raise
            parked += await _park(store, applier, (tenant, session), after + 1, exc)
            continue
        applied += result.applied
        filled += result.gap_filled
        parked += result.parked
    return BatchResult(applied=applied, gap_filled=filled, parked=parked)


async def _park(
    store: ProjectionStore, applier: Applier, key: Key, seq: int, exc: BaseException
) -> int:
    live = await store.live_generations()
    entries = [
        ParkedSession(*key, p.name, live[p.name], seq, describe(exc))
        for p in applier.projections
        if p.name in live
    ]
    await applier.parked.park(entries)
    for entry in entries:
        PARKED.labels(entry.projection).inc()
    _LOG.error("parked a session reconcile cannot apply", tenant=key[0], session=key[1], seq=seq)
    return len(entries)


async def reconcile(
    store: ProjectionStore,
    applier: Applier,
    projections: Sequence[Projection[Any]],
    *,
    idle_s: float = 2.0,
    limit: int = 500,
    owns: Callable[[str, str], bool] = _everyone,
    window_s: float = 60.0,
    sweep: Sweep | None = None,
    sweep_page: int = 1000,
) -> BatchResult:
    """Apply, from the ledger, what idle sessions miss in any live projection."""
    if sweep is None:
        sweep = _SWEEPS.setdefault(applier, Sweep())
    behind = await find_behind(
        store,
        projections,
        idle_s=idle_s,
        limit=limit,
        window_s=window_s,
        sweep=sweep,
        sweep_page=sweep_page,
        owns=owns,
    )
    return await heal(store, applier, behind)
