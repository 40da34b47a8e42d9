"""The worker's side of subagents: the `delegate` tool, creating the child session (linked, with
its task as the first input) for each call, and reporting a finished child's answer to its
parent. Everything is keyed so that a worker that takes over repeats it without effect."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any, Final

from keel_stream.errors import IdempotencyConflict, KeelError, SessionExists, SessionNotFound
from keel_stream.kernel import CommitRequest, Delivery, Event, Kind, StopReason
from keel_stream.kernel.subagents import (
    DELEGATE,
    TASK_KEY_PREFIX,
    child_session_id,
    link_of,
    report_key,
    report_of,
)
from keel_stream.logs import get_logger
from keel_stream.store.protocol import Ledger
from keel_stream.store.subagents import Link, Subagents
from keel_stream.tenancy.policy import SubagentSettings
from keel_stream.worker.decisions import Resolution
from keel_stream.worker.providers.base import ToolSpec

__all__ = [
    "DELEGATE_SPEC",
    "Delegations",
    "offered_tools",
    "report_resolution",
    "reported",
    "task_link",
]

MAX_TASK_CHARS: Final = 32_768
DELEGATE_SPEC: Final = ToolSpec(
    DELEGATE,
    "Hands a task to a subagent: a new session with its own loop answers it, and its final "
    "answer is this call's result. Several calls in one answer run in parallel.",
    {
        "type": "object",
        "properties": {
            "task": {"type": "string", "minLength": 1, "maxLength": MAX_TASK_CHARS},
            "tools": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Only these tools for the subagent (default: the same as yours).",
            },
        },
        "required": ["task"],
    },
)


def task_link(log: Iterable[Event]) -> Mapping[str, Any] | None:
    """The link of a child session: its first input's `subagent`, or None for a root."""
    for event in log:
        if event.kind == Kind.USER_MESSAGE:
            return link_of(event.payload)
    return None


def offered_tools(
    specs: list[ToolSpec], log: list[Event], limits: SubagentSettings, *, delegating: bool
) -> list[ToolSpec]:
    """The tools offered to a session: `delegate` while its depth is under the limit, and for a
    subagent only the tools its task names (if it names any)."""
    link = task_link(log)
    depth = int(link.get("depth", 0)) if link else 0
    if delegating and depth < limits.max_depth:
        specs = [*specs, DELEGATE_SPEC]
    allowed = link.get("tools") if link else None
    if isinstance(allowed, list):
        specs = [s for s in specs if s.name in allowed]
    return specs


def _selection(log: Iterable[Event]) -> Mapping[str, Any] | None:
    chosen = None
    for event in log:
        if event.kind == Kind.USER_MESSAGE and isinstance(event.payload.get("selection"), dict):
            chosen = event.payload["selection"]
    return chosen


def _task_of(call: Mapping[str, Any]) -> tuple[str, list[str] | None] | Resolution:
    """(task, tools) of a delegate call, or the error result saying why it cannot be delegated."""
    arguments = call.get("arguments") or {}
    task = arguments.get("task")
    if not isinstance(task, str) or not task.strip() or len(task) > MAX_TASK_CHARS:
        reason = f"delegate needs a task: a non-empty string of at most {MAX_TASK_CHARS} characters"
        return _refusal("task", reason)
    tools = arguments.get("tools")
    if tools is not None and not (
        isinstance(tools, list) and all(isinstance(t, str) for t in tools)
    ):
        return _refusal("tools", "delegate's tools must be a list of tool names")
    return task, tools


def _refusal(limit: str, text: str) -> Resolution:
    """The error result of a delegate call that gets no child: `subagent.refused` names the limit
    (or the argument) it is over; the parent's attempt goes on with it like any tool's error."""
    return Resolution(None, f"no subagent: {text}", True, field="subagent",
                      provenance={"refused": limit})  # fmt: skip


def _final_text(log: list[Event]) -> str:
    for event in reversed(log):
        if event.kind == Kind.ASSISTANT_MESSAGE and event.payload.get("stopReason") in (
            StopReason.END_TURN, StopReason.MAX_TOKENS,
        ):  # fmt: skip
            content = event.payload.get("content") or []
            return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return ""


def _task_input(
    tenant: str,
    child: str,
    link: Link,
    task: tuple[str, list[str] | None],
    parent_log: list[Event],
) -> CommitRequest:
    """The child's first input: its task, its link to the parent, the parent's selection."""
    linked: dict[str, Any] = {"parent": link.parent, "toolCallId": link.tool_call_id,
                              "depth": link.depth, "root": link.root}  # fmt: skip
    if task[1] is not None:
        linked["tools"] = task[1]
    key = TASK_KEY_PREFIX + link.tool_call_id
    payload: dict[str, Any] = {"text": task[0], "requestId": key,
                               "delivery": Delivery.QUEUE.value, "subagent": linked}  # fmt: skip
    if (selection := _selection(parent_log)) is not None:
        payload["selection"] = dict(selection)
    return CommitRequest(tenant_id=tenant, session_id=child, kind=Kind.USER_MESSAGE,
                         payload=payload, key=key)  # fmt: skip


def report_resolution(call: Mapping[str, Any], seq: int, report: Mapping[str, Any]) -> Resolution:
    """What a child's result makes of the parent's delegate call."""
    status, text = report.get("status"), str(report.get("text") or "")
    provenance = {"child": report.get("child"), "status": status, "resultSeq": seq}
    if status == "done":
        return Resolution(None, text, provenance=provenance, field="subagent")
    if status == "cancelled":
        return Resolution(None, "cancelled: the subagent was cancelled", True, True,
                          provenance, field="subagent")  # fmt: skip
    return Resolution(None, f"the subagent failed: {text or 'no answer'}", True,
                      provenance=provenance, field="subagent")  # fmt: skip


class Delegations:
    def __init__(self, ledger: Ledger, links: Subagents) -> None:
        self._ledger = ledger
        self._links = links
        self._log = get_logger("worker").bind(component="subagents")

    async def ensure(
        self,
        tenant: str,
        parent: str,
        call: Mapping[str, Any],
        parent_log: list[Event],
        limits: SubagentSettings,
    ) -> Resolution | None:
        """Create the call's child (linked, with its task) if it is not there; None when it
        runs, else the call's error result saying which limit it is over."""
        task = _task_of(call)
        if isinstance(task, Resolution):
            return task
        mine = task_link(parent_log)
        depth = int(mine.get("depth", 0)) + 1 if mine else 1
        root = str(mine.get("root", parent)) if mine else parent
        if depth > limits.max_depth:
            reason = f"maxDepth is {limits.max_depth}; this child would be at depth {depth}"
            return _refusal("maxDepth", reason)
        child = child_session_id(parent, str(call["id"]))
        link = Link(parent, str(call["id"]), depth, root)
        if not await self._links.link(tenant, child, link, limits.max_per_tree):
            reason = f"this tree already holds maxPerTree ({limits.max_per_tree}) subagents"
            return _refusal("maxPerTree", reason)
        with contextlib.suppress(SessionExists):  # created by an earlier try
            await self._ledger.create_session(tenant, child)
        await self._ledger.commit(_task_input(tenant, child, link, task, parent_log))
        return None

    async def started(self, tenant: str, parent: str, call: Mapping[str, Any]) -> bool:
        """Whether the call's child has its task (a worker may die before creating it)."""
        return await self._known(tenant, child_session_id(parent, str(call["id"])))

    async def _known(self, tenant: str, child: str) -> bool:
        try:
            return bool(await self._ledger.read_events(tenant, child, after=0, limit=1))
        except SessionNotFound:  # the call got no child, or its worker died before creating it
            return False

    async def report(self, tenant: str, log: list[Event], status: str) -> None:
        """Tell the parent what its child came to (once: a second report is refused by key)."""
        link = task_link(log)
        if link is None:
            return
        call = str(link.get("toolCallId"))
        payload = {"requestId": report_key(call), "delivery": Delivery.QUEUE.value,
                   "subagentResult": {"toolCallId": call, "child": log[0].session,
                                      "status": status, "text": _final_text(log)}}  # fmt: skip
        request = CommitRequest(
            tenant_id=tenant, session_id=str(link.get("parent")), kind=Kind.USER_MESSAGE,
            payload=payload, key=payload["requestId"],
        )  # fmt: skip
        try:
            await self._ledger.commit(request)
        except IdempotencyConflict:
            pass  # reported before (a takeover, or a later run of the child): the first stands
        except KeelError as exc:
            self._log.warning("subagent result not reported", child=log[0].session, error=str(exc))


def reported(events: Iterable[Event]) -> dict[str, tuple[int, Mapping[str, Any]]]:
    """toolCallId -> (seq, result) for the subagent results among `events`."""
    found: dict[str, tuple[int, Mapping[str, Any]]] = {}
    for event in events:
        if event.kind == Kind.USER_MESSAGE and (report := report_of(event.payload)) is not None:
            found.setdefault(str(report.get("toolCallId")), (event.seq, report))
    return found
