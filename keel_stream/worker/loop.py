"""The agent loop: one attempt of a run, committing every fact through the kernel, fenced.

Order per turn (the ordering contract): at the request boundary, guide inputs committed since the
last boundary join the inputs waiting to be presented (one message each, after the sibling tool
results); the inputs the request presents choose its model among the tenant's settings
(keel_stream.worker.agent_settings: provider, system prompt, sampling, compaction budget), and
the context is compacted first if it outgrew that budget; the request carries the transcript's
model view and the tools (built-ins and the tenant's ToolProviders'), and the inputs it presents
become its inputSeqs, so the log replays exactly what the model saw. The provider's output is
assembled and committed as an assistant.message before any tool runs; each tool call's result is
committed as a tool.result keyed by its toolCallId. A call the tenant's policy gates is committed
with an `approval` (the decision is opened by the answer's own commit) and runs only once its
decision is answered; the ungated siblings run at once, and while decisions stay open the attempt
ends waiting, holding no lease (keel_stream.worker.decisions). The loop ends at end_turn, on a
provider error, on a refused settings choice, on cancel, waiting on decisions, or at the turn
bound; the settler then commits run.finished under the same lease and settles the run.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Final

from keel_stream.clock import Clock, utc_now
from keel_stream.kernel import Event, InputTally, Kind, StopReason
from keel_stream.logs import get_logger
from keel_stream.plugins.pinning import BUILTIN, pins_in
from keel_stream.projections.transcript import TRANSCRIPT, TranscriptState
from keel_stream.store.deadlines import Deadlines
from keel_stream.store.protocol import Claim, Ledger, Runs
from keel_stream.tenancy.document import TenantConfig
from keel_stream.worker.agent_settings import (
    AttemptSettings,
    ModelProviders,
    ProviderFactory,
    SettingsRefused,
    TenantConfigCache,
    TurnModel,
)
from keel_stream.worker.answers import Answer, ask_model, generation_id
from keel_stream.worker.calls import Attempt, CallRunner, ms
from keel_stream.worker.compaction import Compactor
from keel_stream.worker.decisions import answers_in, gate_calls
from keel_stream.worker.limits import ToolLimits
from keel_stream.worker.metrics import observe_answer
from keel_stream.worker.partials import PartialsPublisher
from keel_stream.worker.providers.base import Provider, ToolSpec
from keel_stream.worker.session_io import Fenced, SessionIO
from keel_stream.worker.settling import AttemptRecord, AttemptResult, Settler
from keel_stream.worker.signals import Signals, Stopped, unless_stopped
from keel_stream.worker.subagents import Delegations, offered_tools, reported
from keel_stream.worker.tool_providers import ToolProviders
from keel_stream.worker.toolbox import Toolbox
from keel_stream.worker.tools import BuiltinContext

__all__ = ["AgentLoop", "AttemptResult", "Signals"]

_GUIDE: Final = "guide"


class AgentLoop:
    def __init__(
        self,
        ledger: Ledger,
        runs: Runs,
        provider: Provider,
        partials: PartialsPublisher,
        max_turns: int = 8,
        context_budget_chars: int = 0,
        *,
        configs: TenantConfigCache | None = None,
        model_providers: ProviderFactory | None = None,
        tool_providers: ToolProviders | None = None,
        tool_limits: ToolLimits | None = None,
        builtins: BuiltinContext | None = None,
        clock: Clock = utc_now,
        deadlines: Deadlines | None = None,
        delegations: Delegations | None = None,
    ) -> None:
        self._ledger = ledger
        self._partials = partials
        self._max_turns = max_turns
        self._settler = Settler(runs, provider.name, provider.model, deadlines, delegations)
        self._calls = CallRunner(delegations)
        self._fallback = TurnModel(provider, context_budget_chars)
        self._configs = configs or TenantConfigCache(None, None)
        self._model_providers = model_providers or ModelProviders()
        self._tool_providers = tool_providers
        self._tool_limits = tool_limits
        self._builtins = builtins
        self._clock = clock
        self._log = get_logger("worker")

    async def _setup(self, tenant: str, history: list[Event]) -> Attempt:
        resolved = await self._configs.resolve(tenant)
        settings = AttemptSettings(resolved, self._fallback, self._model_providers)
        settings.observe(history)
        connections = []
        if resolved is not None and self._tool_providers is not None:
            declared = resolved.config.external.tools
            connections = self._tool_providers.for_tenant(tenant, declared)
        config = resolved.config if resolved is not None else TenantConfig()
        policy = config.policy if resolved is not None else None
        toolbox = Toolbox(
            connections, self._tool_limits, pins=pins_in(history), builtins=self._builtins
        )
        return Attempt(
            settings, toolbox, policy, config.settings.subagents, history,
            answers_in(history), reported(history),
        )  # fmt: skip

    async def run_attempt(self, claim: Claim, signals: Signals) -> AttemptResult:
        """Run (or, after a takeover, settle) one attempt; never raises for the attempt's own
        failures: a crash is settled as a failed attempt with its summary."""
        log = self._log.bind(session=claim.session, epoch=claim.lease.epoch)
        io = SessionIO(self._ledger, claim)
        record = AttemptRecord()
        try:
            if claim.taken_over:
                await self._resume_calls(io, signals)
                return await self._settler.settle_abandoned(io)
            await self._attempt(io, record, signals)
            record.duration_ms = ms(record.started)
            return await self._settler.settle(io, record)
        except (Fenced, Stopped) as exc:
            # Stopped escapes only when the heartbeat found the lease gone mid-request.
            log.warning("fenced: another worker owns the run", error=str(exc))
            return AttemptResult(None, record.turns, None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a crash settles as a failed attempt
            log.error("attempt crashed", error=repr(exc))
            record.failed, record.stop_reason = True, StopReason.ERROR
            record.error = f"attempt crashed: {exc.__class__.__name__}: {exc}"
            record.duration_ms = ms(record.started)
            return await self._settler.settle(io, record, crashed=True)

    async def _resume_calls(self, io: SessionIO, signals: Signals) -> None:
        """What the dead worker's calls still need from a takeover, whatever the run's budget:
        a worker that died right after committing `delegate` calls may not have created their
        subagents (created now; every step is keyed); and if the run's cancel was asked (then
        `signals.cancel` is set at the claim), every call that would run is closed as cancelled
        (keel_stream.worker.calls) so that no later attempt runs it."""
        history = await io.read_log()
        account = InputTally().observe_many(history).account(io.claim.read_watermark)
        if not account.waiting and not signals.cancel.is_set():
            return
        attempt = await self._setup(io.claim.tenant, history)
        transcript = TRANSCRIPT.apply_many(TRANSCRIPT.initial(), history)
        await self._calls.answer_calls(io, transcript, AttemptRecord(), signals, attempt)

    async def _attempt(self, io: SessionIO, record: AttemptRecord, signals: Signals) -> None:
        history = await io.read_log()
        record.seen_through = history[-1].seq if history else 0
        account = InputTally().observe_many(history).account(io.claim.read_watermark)
        if not account.needs_turn and not account.waiting:
            return  # Nothing owed (a race with an answer): settled done, with its summary.
        # Waiting calls still pass through the call runner once: a subagent that a worker died
        # before creating is created now (each step is keyed; repeating it changes nothing).
        attempt = await self._setup(io.claim.tenant, history)
        transcript = TRANSCRIPT.apply_many(TRANSCRIPT.initial(), history)
        seen = history[-1].seq if history else 0
        while True:
            transcript = await self._calls.answer_calls(io, transcript, record, signals, attempt)
            if record.waiting:
                break
            if signals.cancel.is_set() or record.cancelled:
                record.cancelled, record.stop_reason = True, StopReason.ABORTED
                break
            if record.turns >= self._max_turns:
                record.failed, record.stop_reason = True, StopReason.MAX_TURNS
                record.error = f"stopped after {record.turns} turns"
                break
            transcript, seen = await self._take_guides(io, transcript, seen, attempt)
            try:
                model = attempt.settings.model_for({m["seq"] for m in transcript.waiting})
            except SettingsRefused as exc:
                await self._refuse(io, transcript, record, str(exc))
                break
            transcript, seen = await self._compact(io, transcript, seen, model, signals)
            tools = await self._tools(attempt, signals)
            record.turns += 1
            asked = time.monotonic()
            answer = await ask_model(
                model, tools, self._partials, io.claim, transcript.model_view,
                record.turns, signals,
            )  # fmt: skip
            observe_answer(
                model.provider.name, time.monotonic() - asked, answer.finish,
                cancelled=answer.cancelled,
            )  # fmt: skip
            committed = await self._commit_answer(io, answer, transcript, record, model, attempt)
            seen = max(seen, committed.seq)
            transcript = TRANSCRIPT.apply_many(transcript, [committed])
            if answer.cancelled or record.stop_reason != StopReason.TOOL_USE:
                break
        record.context_messages = len(transcript.model_view)

    async def _take_guides(
        self, io: SessionIO, transcript: TranscriptState, seen: int, attempt: Attempt
    ) -> tuple[TranscriptState, int]:
        """Guides committed since the last request boundary join this request."""
        fresh = await io.read_log(after=seen)
        if not fresh:
            return transcript, seen
        guides = [
            e for e in fresh if e.kind == Kind.USER_MESSAGE and e.payload.get("delivery") == _GUIDE
        ]
        attempt.settings.observe(guides)
        for decision, answered in answers_in(fresh).items():
            attempt.answers.setdefault(decision, answered)
        for call, result in reported(fresh).items():
            attempt.reports.setdefault(call, result)
        return TRANSCRIPT.apply_many(transcript, guides), fresh[-1].seq

    async def _compact(
        self,
        io: SessionIO,
        transcript: TranscriptState,
        seen: int,
        model: TurnModel,
        signals: Signals,
    ) -> tuple[TranscriptState, int]:
        """Compact first if the context outgrew the turn's budget."""
        compactor = Compactor(model.provider, model.budget_chars)
        try:
            compaction = await compactor.compact(io, transcript, signals)
        except Stopped:
            if signals.fenced.is_set():
                raise Fenced("lease lost while compacting") from None
            return transcript, seen
        if compaction is not None:
            transcript = TRANSCRIPT.apply_many(transcript, [compaction])
            seen = max(seen, compaction.seq)
        return transcript, seen

    async def _tools(self, attempt: Attempt, signals: Signals) -> list[ToolSpec]:
        """The request's tools (with `delegate` while the tree may grow, and only those its
        task allows for a subagent); a cancel while providers connect leaves theirs out."""
        try:
            specs = await unless_stopped(attempt.toolbox.specs(), signals)
        except Stopped:
            if signals.fenced.is_set():
                raise Fenced("lease lost while tool providers connected") from None
            specs = await Toolbox().specs()
        delegating = self._calls.delegates
        return offered_tools(specs, attempt.history, attempt.limits, delegating=delegating)

    async def _refuse(
        self, io: SessionIO, transcript: TranscriptState, record: AttemptRecord, error: str
    ) -> None:
        """The tenant's settings cannot serve the request: a failed answer presents its inputs
        (so the run fails for good instead of being owed again) without asking any model."""
        record.failed, record.retriable = True, False
        record.stop_reason, record.error = StopReason.ERROR, error
        payload: dict[str, Any] = {
            "role": "assistant",
            "content": [],
            "inputSeqs": [m["seq"] for m in transcript.waiting],
            "stopReason": StopReason.ERROR,
            "generationId": generation_id(io.claim, record.turns + 1),
            "errorMessage": error,
        }
        await io.commit(Kind.ASSISTANT_MESSAGE, payload)

    async def _commit_answer(
        self,
        io: SessionIO,
        answer: Answer,
        transcript: TranscriptState,
        record: AttemptRecord,
        model: TurnModel,
        attempt: Attempt,
    ) -> Event:
        finish = answer.finish
        record.add_usage(finish.usage)
        record.stop_reason = StopReason.ABORTED if answer.cancelled else finish.stop_reason
        record.model = model
        payload: dict[str, Any] = {
            "role": "assistant",
            "content": (
                gate_calls(answer.content, attempt.policy, self._clock())
                if record.stop_reason == StopReason.TOOL_USE
                else answer.content
            ),
            "inputSeqs": [m["seq"] for m in transcript.waiting],
            "stopReason": record.stop_reason,
            "generationId": answer.generation_id,
            "provider": model.provider.name,
            "model": model.provider.model,
        }
        settings = model.settings_record()
        if settings is not None:
            payload["settings"] = settings
        pinned = [t for t in attempt.toolbox.catalog() if t["source"] != BUILTIN]
        if pinned:  # the schemas this session was shown (built-ins ship with the worker)
            payload["tools"] = pinned
        if finish.usage:
            payload["usage"] = dict(finish.usage)
        if answer.cancelled:
            record.cancelled = True
        elif finish.stop_reason == StopReason.ERROR:
            record.failed, record.error = True, finish.error
            record.retriable = finish.retriable
            record.retry_after_s = finish.retry_after_s
            if finish.error:
                payload["errorMessage"] = finish.error
        return await io.commit(Kind.ASSISTANT_MESSAGE, payload)
