"""Subagents in the seed's vocabulary: a child session per `delegate` call.

The parent's answer calls the built-in tool `delegate`; the child session (its id derived from
the parent and the toolCallId) gets the task as its first input, a user.message carrying
``subagent: {parent, toolCallId, depth, root, tools?}``; when the child's run ends, its result is
reported to the parent as a user.message keyed ``subagent:<toolCallId>`` carrying
``subagentResult: {toolCallId, child, status, text}`` (never an input: like a decision's answer it
releases a waiting call); the parent's worker turns it into the call's tool.result, once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Final

from keel_stream.errors import InvalidPayload, PayloadRule

__all__ = [
    "DELEGATE",
    "REPORT_KEY_PREFIX",
    "TASK_KEY_PREFIX",
    "child_session_id",
    "is_delegation",
    "link_of",
    "report_key",
    "report_of",
    "validate_report",
]

DELEGATE: Final = "delegate"
"""The built-in tool a model calls to hand a task to a subagent."""
REPORT_KEY_PREFIX: Final = "subagent:"
TASK_KEY_PREFIX: Final = "subagent-task:"


def child_session_id(parent: str, tool_call_id: str) -> str:
    """The child's session id: the same for every worker that handles the call."""
    digest = hashlib.sha256(f"{parent}\x00{tool_call_id}".encode()).hexdigest()
    return f"sub-{digest[:32]}"


def report_key(tool_call_id: str) -> str:
    return REPORT_KEY_PREFIX + tool_call_id


def is_delegation(block: Mapping[str, Any]) -> bool:
    return block.get("name") == DELEGATE


def report_of(payload: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The subagent result a user.message reports to its parent, or None."""
    report = payload.get("subagentResult")
    return report if isinstance(report, Mapping) else None


def link_of(payload: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The link a child's task input carries to its parent, or None."""
    link = payload.get("subagent")
    return link if isinstance(link, Mapping) else None


def validate_report(payload: Mapping[str, Any]) -> None:
    if "subagentResult" not in payload:
        return
    report = payload["subagentResult"]
    rule = PayloadRule.DECISION_INVALID
    if not isinstance(report, Mapping) or not isinstance(report.get("toolCallId"), str):
        raise InvalidPayload(rule, "subagentResult must name its toolCallId")
    if payload.get("requestId") != report_key(report["toolCallId"]):
        raise InvalidPayload(rule, "a subagent result's requestId is subagent:<toolCallId>")
    if report.get("status") not in ("done", "failed", "cancelled"):
        raise InvalidPayload(rule, "subagentResult.status must be done, failed or cancelled")
