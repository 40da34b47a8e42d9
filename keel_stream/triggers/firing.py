"""Planning a firing (in the trigger row's transaction) and carrying it out (a ledger commit).

Planning records the firing, its decision and its trigger.before rows, and advances the
schedule, in one transaction under the trigger's lock; carrying out commits the user.message
keyed `trigger:{id}:{key}` and records the outcome with its trigger.after rows. A crash between
the two leaves the firing open, and whoever finishes it commits the same request again: the
ledger answers the first commit's seq (created: false), so the input is in the log once.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from keel_stream.errors import KeelError, SessionExists, TriggerNotFound, TriggerPaused
from keel_stream.kernel.limits import check_event_size
from keel_stream.kernel.types import CommitRequest
from keel_stream.store.protocol import Ledger
from keel_stream.store.triggers import FiringRow, TriggerRow
from keel_stream.store.triggers_schedule import (
    NewFiring,
    Outcome,
    PlanTransaction,
    TriggerScheduleStore,
)
from keel_stream.triggers import metrics
from keel_stream.triggers.hook_rows import AFTER, BEFORE, hook_rows
from keel_stream.triggers.models import MAX_MESSAGE_BYTES, CreateTrigger, schedule_of
from keel_stream.triggers.policy import (
    BUSY_STATUSES,
    EXECUTES,
    Plan,
    decide,
    message_payload,
    new_session_id,
    render,
)
from keel_stream.triggers.schedule import fire_key, iso, jitter_of
from keel_stream.triggers.signatures import Verified

__all__ = ["Planned", "carry_out", "first_nominal", "plan_delivery", "plan_next"]

_TICK: Final = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class Planned:
    progressed: bool
    """False when nothing was due (or the lease lapsed): stop planning this trigger."""
    firing: FiringRow | None
    """The firing recorded now; None when its key had been recorded before."""


def _target(trigger: TriggerRow, spec: CreateTrigger, key: str) -> str:
    if spec.target.session is not None:
        return spec.target.session
    return new_session_id(trigger.id, key, trigger.kind == "schedule")


async def _decide(
    tx: PlanTransaction, trigger: TriggerRow, spec: CreateTrigger, session: str
) -> Plan:
    busy = False
    if spec.target.session is not None:
        busy = await tx.run_status(trigger.tenant, session) in BUSY_STATUSES
    buffered = busy and spec.overlap == "buffer_one" and await tx.has_buffered(trigger.id)
    return decide(spec.overlap, busy, buffered, spec.input.delivery)


async def _hooks(tx: PlanTransaction, hook: str, firing: FiringRow, data: dict[str, Any]) -> None:
    rows = hook_rows(
        await tx.subscriptions(firing.tenant),
        hook,
        tenant=firing.tenant,
        trigger_id=firing.trigger_id,
        session=firing.session,
        firing_id=firing.id,
        key=firing.key,
        at=tx.now,
        data={"key": firing.key, "nominalTime": iso(firing.nominal_at), **data},
    )
    await tx.insert_deliveries(rows)


async def _recorded(tx: PlanTransaction, firing: FiringRow | None) -> None:
    """The trigger.before rows of a firing just recorded (and trigger.after for a skip)."""
    if firing is None:
        return
    metrics.DECISIONS.labels(firing.decision).inc()
    before = {
        "actualTime": iso(firing.actual_at),
        "decision": firing.decision,
        "reason": firing.reason,
        "delivery": firing.delivery,
        **firing.detail,
    }
    await _hooks(tx, BEFORE, firing, before)
    if firing.outcome is not None:
        metrics.OUTCOMES.labels(firing.outcome).inc()
        await _hooks(tx, AFTER, firing, {"outcome": firing.outcome, "seq": None, "created": None})


async def plan_next(tx: PlanTransaction, owner: str) -> Planned:
    """Plan the trigger's next nominal time if it is due: record its firing, advance."""
    trigger = tx.trigger
    if (
        trigger is None
        or trigger.state != "active"
        or trigger.next_nominal_at is None
        or trigger.next_fire_at is None
        or trigger.next_fire_at > tx.now
    ):
        return Planned(False, None)
    spec = CreateTrigger.model_validate(trigger.spec)
    assert spec.schedule is not None
    schedule = schedule_of(spec.schedule)
    nominal = trigger.next_nominal_at
    key = fire_key(nominal)
    session = _target(trigger, spec, key)
    cutoff = tx.now - timedelta(seconds=spec.schedule.catchup_window_s)
    detail: dict[str, Any] = {"newSession": True} if spec.target.new_session else {}
    if nominal < cutoff:
        following = schedule.next_after(cutoff - _TICK)
        detail["missed"] = schedule.count_through(nominal, cutoff - _TICK)
        plan = Plan("skip", "missed", None, "skipped")
    else:
        following = schedule.next_after(nominal)
        plan = await _decide(tx, trigger, spec, session)
    fires = trigger.fires + (1 if plan.decision in EXECUTES else 0)
    limit = spec.schedule.max_fires
    if following is None or (limit is not None and fires >= limit):
        following = None
    jitter = spec.schedule.jitter_s
    firing = await tx.insert_firing(
        NewFiring(
            trigger_id=trigger.id,
            tenant=trigger.tenant,
            key=key,
            nominal_at=nominal,
            actual_at=nominal + jitter_of(trigger.id, nominal, jitter),
            decision=plan.decision,
            reason=plan.reason,
            delivery=plan.delivery,
            session=session,
            message=render(spec.input.text, {"trigger": trigger.id, "nominalTime": key}),
            detail=detail,
            outcome=plan.outcome,
            planned_by=owner,
        )
    )
    await tx.advance(
        trigger.id,
        following,
        None if following is None else following + jitter_of(trigger.id, following, jitter),
        fires,
        "active" if following is not None else "completed",
    )
    await _recorded(tx, firing)
    return Planned(True, firing)


async def plan_delivery(
    tx: PlanTransaction, delivery: Verified, body: str, owner: str
) -> tuple[FiringRow, bool]:
    """Record an inbound webhook's firing; (the firing, True) when recorded now, (the earlier
    one, False) for a delivery seen before (its signed key). PayloadTooLarge, recording
    nothing, when the rendered message would not fit one event."""
    trigger = tx.trigger
    if trigger is None:
        raise TriggerNotFound("trigger not found")
    delivery_id = delivery.key
    earlier = await tx.firing_by_key(trigger.id, delivery_id)
    if earlier is not None:
        return earlier, False
    if trigger.state != "active":
        raise TriggerPaused(f"trigger {trigger.id!r} is {trigger.state}")
    spec = CreateTrigger.model_validate(trigger.spec)
    session = _target(trigger, spec, delivery_id)
    plan = await _decide(tx, trigger, spec, session)
    values = {"trigger": trigger.id, "nominalTime": iso(tx.now), "deliveryId": delivery.delivery_id}
    message = render(spec.input.text, {**values, "body": body})
    check_event_size({"text": message}, MAX_MESSAGE_BYTES)
    firing = await tx.insert_firing(
        NewFiring(
            trigger_id=trigger.id,
            tenant=trigger.tenant,
            key=delivery_id,
            nominal_at=tx.now,
            actual_at=tx.now,
            decision=plan.decision,
            reason=plan.reason,
            delivery=plan.delivery,
            session=session,
            message=message,
            detail={"newSession": True} if spec.target.new_session else {},
            outcome=plan.outcome,
            planned_by=owner,
        )
    )
    assert firing is not None  # the trigger row's lock serialises deliveries of one trigger
    fires = trigger.fires + (1 if plan.decision in EXECUTES else 0)
    await tx.advance(trigger.id, None, None, fires, trigger.state)
    await _recorded(tx, firing)
    return firing, True


async def _commit(
    ledger: Ledger,
    store: TriggerScheduleStore,
    firing: FiringRow,
    new_session: bool,
    cancel: bool,
) -> Outcome:
    try:
        if new_session:
            with contextlib.suppress(SessionExists):  # created by an earlier try of it
                await ledger.create_session(firing.tenant, firing.session)
        if cancel:
            await store.request_cancel(firing.tenant, firing.session)
        payload = message_payload(
            firing.trigger_id,
            firing.key,
            firing.nominal_at,
            firing.id,
            firing.message,
            firing.delivery,
        )
        request = CommitRequest(
            tenant_id=firing.tenant,
            session_id=firing.session,
            kind="user.message",
            payload=payload,
        )
        submission = await ledger.commit(request)
    except KeelError as exc:
        if exc.retriable:
            raise  # the firing stays open; the next claim finishes it
        return Outcome("failed", error=f"{exc.error_code}: {exc.message}"[:500])
    return Outcome("committed", submission.seq, submission.created)


async def carry_out(
    ledger: Ledger, store: TriggerScheduleStore, firing: FiringRow, *, first: bool
) -> FiringRow | None:
    """Commit an open firing's message and record the outcome (None when a buffered firing's
    target is still busy, or another replica recorded the outcome first). `first`: carried
    out right after planning; only then does cancel_other cancel (a leftover's cancel may
    have happened, and a second one could stop the attempt answering this input)."""
    if (
        firing.decision == "buffer"
        and await store.run_status(firing.tenant, firing.session) in BUSY_STATUSES
    ):
        return None
    cancel = first and firing.decision == "cancel_other"
    new_session = firing.detail.get("newSession") is True
    outcome = await _commit(ledger, store, firing, new_session, cancel)
    async with store.finish(firing.id, outcome) as (tx, finished):
        if finished is not None:
            metrics.OUTCOMES.labels(outcome.outcome).inc()
            data = {"outcome": outcome.outcome, "seq": outcome.seq, "created": outcome.created}
            if outcome.error is not None:
                data["error"] = outcome.error
            await _hooks(tx, AFTER, finished, data)
    return finished


def first_nominal(
    spec: CreateTrigger, trigger_id: str, now: datetime
) -> tuple[datetime, datetime] | None:
    """The first nominal time after `now` and its actual time (None: the schedule has none)."""
    assert spec.schedule is not None
    nominal = schedule_of(spec.schedule).next_after(now)
    if nominal is None:
        return None
    return nominal, nominal + jitter_of(trigger_id, nominal, spec.schedule.jitter_s)
