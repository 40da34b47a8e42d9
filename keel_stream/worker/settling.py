"""Settling an attempt: exactly one run.finished summary, then the run's status by the policy.

Every settled attempt leaves one summary, whoever settles it: the attempt itself when it ends
(or crashes), or the worker that takes the run over after the attempt's worker died. Each
summary records the lease epoch it was committed under, so a new owner can tell whether the
dead one had already written its summary before it died (and must not write a second).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from keel_stream.errors import KeelError
from keel_stream.kernel import (
    AttemptOutcome,
    Event,
    InputAccount,
    InputTally,
    Kind,
    RunStatus,
    StopReason,
    finish_status,
)
from keel_stream.kernel.decisions import released_call
from keel_stream.kernel.status import fresh_budget
from keel_stream.logs import get_logger
from keel_stream.store.deadlines import Deadlines
from keel_stream.store.protocol import Runs, Settlement
from keel_stream.worker.agent_settings import TurnModel
from keel_stream.worker.expiry import deadlines_of, has_decisions
from keel_stream.worker.metrics import SETTLED
from keel_stream.worker.session_io import SessionIO
from keel_stream.worker.subagents import Delegations

__all__ = ["AttemptRecord", "AttemptResult", "Settler"]


@dataclass(frozen=True, slots=True)
class AttemptResult:
    status: RunStatus | None
    """The settled run status; None when the attempt was fenced and nothing was settled."""
    turns: int
    stop_reason: str | None


@dataclass
class AttemptRecord:
    """What an attempt did, kept as it runs so that even a crashed attempt can be summarised."""

    started: float = field(default_factory=time.monotonic)
    turns: int = 0
    usage: dict[str, int] = field(default_factory=dict)
    timings: list[dict[str, Any]] = field(default_factory=list)
    context_messages: int = 0
    stop_reason: str | None = None
    error: str | None = None
    cancelled: bool = False
    failed: bool = False
    retriable: bool = True
    waiting: bool = False
    """The attempt stopped because every call left waits (an open decision, a subagent)."""
    seen_through: int | None = None
    """The last seq of the log the attempt read when it started (None: it read none)."""
    duration_ms: int | None = None
    """Known only for attempts this process ran."""
    model: TurnModel | None = None
    """What the latest answer ran on; None: the worker's provider."""
    abandoned_epoch: int | None = None
    """For an attempt whose worker died: the epoch it ran under (its summary is committed
    under the epoch of the worker that took the run over)."""
    retry_after_s: float | None = None
    """The model server asked to wait this long when the attempt failed (Retry-After)."""

    def add_usage(self, usage: Mapping[str, int] | None) -> None:
        for key, value in (usage or {}).items():
            self.usage[key] = self.usage.get(key, 0) + value


def _abandoned(log: list[Event], latest_summary: int, epoch: int, cancelled: bool) -> AttemptRecord:
    """The record of an attempt whose worker died: what its answers in the log show."""
    record = AttemptRecord(
        stop_reason=StopReason.ABORTED if cancelled else StopReason.ERROR,
        error=f"attempt abandoned: the lease of epoch {epoch - 1} expired (its worker stopped)",
        cancelled=cancelled,
        failed=not cancelled,
        abandoned_epoch=epoch - 1,
    )
    for event in log:
        if event.seq > latest_summary and event.kind == Kind.ASSISTANT_MESSAGE:
            record.turns += 1
            usage = event.payload.get("usage")
            record.add_usage(usage if isinstance(usage, Mapping) else None)
    return record


def _recorded(summary: Mapping[str, Any]) -> AttemptRecord:
    """The record a summary already in the log describes."""
    status = summary.get("status")
    return AttemptRecord(
        stop_reason=summary.get("stopReason"),
        cancelled=status == "cancelled",
        failed=status == "failed",
    )


def _outcome_status(outcome: AttemptOutcome) -> str:
    """The attempt's status in its summary: done, failed or cancelled."""
    return "cancelled" if outcome.cancelled else "failed" if outcome.failed else "done"


def _released_late(log: list[Event], pending: frozenset[str], seen_through: int | None) -> bool:
    """Whether a call still without a result was released (answered, or its subagent reported)
    after the attempt read the log: like late input, it owes a run."""
    if seen_through is None or not pending:
        return False
    return any(
        e.seq > seen_through and released_call(e.payload) in pending
        for e in log
        if e.kind == Kind.USER_MESSAGE
    )


def _finished(status: RunStatus, account: InputAccount) -> bool:
    """Whether a run has come to an end its parent can be told of (a subagent's)."""
    if status == RunStatus.FAILED:
        return True
    return status == RunStatus.DONE and not account.waiting and not account.needs_turn


def _report_status(outcome: AttemptOutcome, status: RunStatus) -> str:
    if outcome.cancelled:
        return "cancelled"
    return "failed" if status == RunStatus.FAILED else "done"


class Settler:
    def __init__(
        self,
        runs: Runs,
        provider: str,
        model: str,
        deadlines: Deadlines | None = None,
        delegations: Delegations | None = None,
    ) -> None:
        self._runs = runs
        self._deadlines = deadlines
        self._delegations = delegations
        self._provider = provider
        self._model = model
        self._log = get_logger("worker")

    async def settle(
        self, io: SessionIO, record: AttemptRecord, *, crashed: bool = False
    ) -> AttemptResult:
        """Summarise and settle an attempt this worker ran. A crashed attempt's inputs count as
        presented: a crash that repeats spends the budget instead of earning a fresh one."""
        log = await io.read_log()
        return await self._settle(io, record, log, summarise=True, abandoned=crashed)

    async def settle_abandoned(self, io: SessionIO) -> AttemptResult:
        """Settle the attempt of a run taken over: its worker died before settling it."""
        claim = io.claim
        log = await io.read_log()
        summaries = [e for e in log if e.kind == Kind.RUN_FINISHED]
        latest = summaries[-1] if summaries else None
        if latest is not None and latest.payload.get("epoch") == claim.lease.epoch - 1:
            # The dead owner committed its summary and died before settling the run.
            return await self._settle(io, _recorded(latest.payload), log, summarise=False)
        since = latest.seq if latest is not None else 0
        record = _abandoned(log, since, claim.lease.epoch, claim.cancel_requested)
        # What the dead attempt presented to the model is not known (its watermark died with
        # it): its inputs count as seen, so an attempt that dies the same way every time (a
        # deterministic crash) spends the budget instead of earning a fresh one forever.
        return await self._settle(io, record, log, summarise=True, abandoned=True)

    async def _settle(
        self,
        io: SessionIO,
        record: AttemptRecord,
        log: list[Event],
        *,
        summarise: bool,
        abandoned: bool = False,
    ) -> AttemptResult:
        claim = io.claim
        inputs = InputTally().observe_many(log)
        account = inputs.account(claim.read_watermark)
        # An attempt that stopped to wait owes nothing; if an answer arrived before this read,
        # the session owes a run again at once (as for late input).
        answered_meanwhile = (record.waiting and account.needs_turn) or _released_late(
            log, inputs.pending_calls, record.seen_through
        )
        unseen = account.unpresented
        if record.cancelled and record.seen_through is not None:
            # A cancel is meant for the input the attempt had when it started; only input that
            # came later owes a run again (the seed's "input it never saw").
            unseen = tuple(s for s in unseen if s > record.seen_through)
        outcome = AttemptOutcome(
            cancelled=record.cancelled,
            failed=record.failed
            or (not record.cancelled and not record.waiting and account.owed_turn),
            attempts=claim.attempts,
            max_attempts=claim.max_attempts,
            more_input=answered_meanwhile
            or (bool(unseen) and not abandoned and not account.waiting),
            retriable=record.retriable,
        )
        if summarise:
            await self._summarise(io, record, outcome, account)
        if self._deadlines is not None and has_decisions(log):
            # Before the lease is given up, so a decision is never open without its deadline.
            open_now = deadlines_of(claim.tenant, claim.session, log)
            await self._deadlines.sync(claim.tenant, claim.session, open_now)
        status = finish_status(outcome)
        if self._delegations is not None and _finished(status, account):
            # Before the lease is given up: a child's result always reaches its parent.
            await self._delegations.report(claim.tenant, log, _report_status(outcome, status))
        settlement = Settlement(
            status=status,
            read_watermark=max(inputs.answered, default=0),
            accounted_through=log[-1].seq if log else 0,
            fresh_budget=fresh_budget(outcome),
            retry_after_s=record.retry_after_s,
        )
        settled = await self._runs.settle(claim, settlement)
        if settled is not None:
            SETTLED.labels(_outcome_status(outcome), settled).inc()
        return AttemptResult(settled, record.turns, record.stop_reason)

    async def _summarise(
        self,
        io: SessionIO,
        record: AttemptRecord,
        outcome: AttemptOutcome,
        account: InputAccount | None = None,
    ) -> None:
        summary: dict[str, Any] = {
            "status": _outcome_status(outcome),
            "turns": record.turns,
            "tokens": record.usage,
            "toolTimings": record.timings,
            "context": {"messages": record.context_messages},
            "stopReason": record.stop_reason,
            "provider": self._provider,
            "model": self._model,
            "epoch": io.claim.lease.epoch,
        }
        if record.model is not None:
            summary["provider"] = record.model.provider.name
            summary["model"] = record.model.provider.model
            settings = record.model.settings_record()
            if settings is not None:
                summary["settings"] = settings
        if record.duration_ms is not None:
            summary["durationMs"] = record.duration_ms
        if record.error:
            summary["error"] = record.error
        if record.abandoned_epoch is not None:
            summary["abandonedEpoch"] = record.abandoned_epoch
        if account is not None and account.open_decisions:
            summary["openDecisions"] = list(account.open_decisions)
        if account is not None and account.running_subagents:
            summary["runningSubagents"] = list(account.running_subagents)
        try:
            await io.commit(Kind.RUN_FINISHED, summary)
        except KeelError as exc:
            # A failed summary write never changes how the attempt settles (seed §6).
            self._log.warning("run.finished not recorded", error=str(exc))
