"""Helpers for the decisions tests: a policy, a movable clock, and reading a session's log."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import httpx

from keel_stream.clock import utc_now
from keel_stream.kernel import Event
from keel_stream.store import PostgresLedger
from keel_stream.tenancy.document import TenantConfig
from tests.support.wait import wait_until


class MovableClock:
    def __init__(self) -> None:
        self.now = utc_now()

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


def policy(**tools: dict[str, Any]) -> TenantConfig:
    return TenantConfig.model_validate({"policy": {"tools": tools}})


ALL_OUTCOMES: dict[str, Any] = {
    "approval": "always",
    "outcomes": ["approve", "edit", "reject", "respond"],
}


async def log_of(ledger: PostgresLedger, session: str) -> list[Event]:
    return await ledger.read_events("acme", session, after=0, limit=1000)


async def open_decisions(client: httpx.AsyncClient, session: str, count: int) -> list[Any]:
    """Wait until the session has `count` open decisions; they, in opening order."""
    found: list[Any] = []

    async def opened() -> bool:
        answer = await client.get(f"/v1/sessions/{session}/decisions?state=open")
        found[:] = answer.json()["decisions"]
        return len(found) == count

    await wait_until(opened, 30, f"{count} open decisions in {session}")
    return found


def results(log: list[Event]) -> dict[str, Event]:
    return {str(e.payload["toolCallId"]): e for e in log if e.kind == "tool.result"}


def final_answers(log: list[Event]) -> list[Event]:
    return [
        e for e in log
        if e.kind == "assistant.message" and e.payload.get("stopReason") == "end_turn"
    ]  # fmt: skip
