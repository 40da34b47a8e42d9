"""Hooks: signed webhooks derived from the ledger (docs/hooks.md).

Hook events are a pure fold of each session's committed events (derive.py); a consumer of
keel.events.v1 writes one delivery row per (subscription, hook event) and leased senders POST
them with the Standard Webhooks envelope and signature. Nothing here sits in a worker's turn.
"""

from __future__ import annotations

from typing import Final

__all__ = ["HOOK_NAMES"]

HOOK_NAMES: Final = (
    "subagent.started",
    "subagent.finished",
    "trigger.before",
    "trigger.after",
    "turn.started",
    "turn.finished",
    "decision.opened",
    "decision.answered",
)
"""The hook events this build emits (GET /v1/capabilities lists them)."""
