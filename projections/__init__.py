"""Projections: pure folds over the ledger (no I/O), hosted by Faust for the live path."""

from typing import Any

from keel_stream.projections.base import EventLike, Folded, Projection, SeqGap, fold, step
from keel_stream.projections.run_status import RUN_STATUS, RunStatusProjection, RunStatusState
from keel_stream.projections.sse import SSE, SseProjection, SseState, render_frame
from keel_stream.projections.transcript import TRANSCRIPT, TranscriptProjection, TranscriptState

ALL: tuple[Projection[Any], ...] = (TRANSCRIPT, RUN_STATUS, SSE)

__all__ = [
    "ALL",
    "RUN_STATUS",
    "SSE",
    "TRANSCRIPT",
    "EventLike",
    "Folded",
    "Projection",
    "RunStatusProjection",
    "RunStatusState",
    "SeqGap",
    "SseProjection",
    "SseState",
    "TranscriptProjection",
    "TranscriptState",
    "fold",
    "render_frame",
    "step",
]
