"""After the chaos: what the clients were told against what the platform holds.

Every acknowledged input is looked up in the ledger (`GET /v1/sessions/{id}/events`, which reads
PostgreSQL) and in the transcript read model (`GET /v1/sessions/{id}/transcript`, what the
projections worker stored):

- lost: acknowledged, but its requestId is not in the ledger (or not at the acknowledged seq);
- duplicated: a requestId twice in the ledger, or a user message twice in the transcript;
- unanswered: acknowledged, and no completed assistant message in the transcript lists it;
- unacknowledged: the client gave up on it (the retries outlived the end of the run).

Then `keel-stream verify` checks ledger = topic = read models for the tenant.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

import httpx
import orjson

from benchmarks.chaos_cluster import TENANT, keel
from benchmarks.chaos_load import SessionLoad

__all__ = ["Audit", "Verified", "audit", "settle", "verify"]

_PAGE: Final = 1000
_NO_COMMAND: Final = ("No such command", "no such command")


@dataclass
class Audit:
    acknowledged: int = 0
    unacknowledged: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    unanswered: list[str] = field(default_factory=list)
    missing_from_transcript: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Verified:
    available: bool
    passed: bool
    seconds: float
    output: str

    def counts(self) -> str:
        """verify's counts in one line: what it compared and found."""
        try:
            found = orjson.loads(self.output)
        except orjson.JSONDecodeError:
            return "no counts (verify did not answer JSON)"
        counts = ", ".join(f"{k} {v}" for k, v in found.get("counts", {}).items())
        models = ", ".join(
            f"{name} {m['sessions']} sessions/{m['differs']} differ/{m['behind']} behind"
            for name, m in found.get("readModels", {}).items()
        )
        return f"{counts}; read models: {models}"

    def summary(self, most: int = 5) -> list[str]:
        """What verify reported, shortly: how many differences, the first few, and its notes."""
        try:
            found = orjson.loads(self.output)
        except orjson.JSONDecodeError:
            return self.output.strip().splitlines()[-most:]
        lines = [f"{found.get('failed', '?')} differences, {len(found.get('notes', []))} notes"]
        for item in [*found.get("failures", [])[:most], *found.get("notes", [])[:most]]:
            where = f"{item.get('session')} seq {item.get('seq')}"
            lines.append(f"{item.get('check')} {where}: {item.get('detail')}")
        return lines


async def _get(client: httpx.AsyncClient, path: str, params: dict[str, Any]) -> Any:
    """GET with retries: the audit reads through the same API the clients used."""
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(httpx.HTTPError):
            response = await client.get(path, params=params, timeout=30)
            if response.is_success:
                return orjson.loads(response.content)
        if time.monotonic() > deadline:
            raise RuntimeError(f"GET {path} kept failing")
        await asyncio.sleep(0.5)


async def ledger_events(client: httpx.AsyncClient, session: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    after = 0
    while True:
        page = await _get(
            client, f"/v1/sessions/{session}/events", {"after": after, "limit": _PAGE}
        )
        events.extend(page["events"])
        if page["nextCursor"] is None:
            return events
        after = int(page["nextCursor"])


def _answered(entries: list[dict[str, Any]]) -> set[int]:
    """The input seqs a completed assistant message of the transcript answered."""
    seen: list[int] = []
    answered: set[int] = set()
    for entry in entries:
        if entry.get("kind") == "user.message":
            seen.append(int(entry["seq"]))
        elif entry.get("kind") == "assistant.message" and not entry.get("failed"):
            listed = entry.get("inputSeqs")
            # without inputSeqs (an older log) an answer covers every input before it
            covered = listed if isinstance(listed, list) else seen
            answered.update(int(s) for s in covered)
    return answered


async def _audit_session(client: httpx.AsyncClient, session: SessionLoad, found: Audit) -> None:
    events = await ledger_events(client, session.id)
    in_ledger = {
        str(e["payload"].get("requestId")): int(e["seq"])
        for e in events
        if e["kind"] == "user.message"
    }
    ids = Counter(str(e["payload"].get("requestId")) for e in events if e["kind"] == "user.message")
    found.duplicated.extend(rid for rid, n in ids.items() if n > 1)
    last_seq = max((int(e["seq"]) for e in events), default=0)
    model = await _get(
        client, f"/v1/sessions/{session.id}/transcript", {"min_seq": last_seq, "wait_s": 10}
    )
    entries = list(model["state"].get("entries", []))
    users = Counter(str(e.get("requestId")) for e in entries if e.get("kind") == "user.message")
    found.duplicated.extend(f"{rid} (transcript)" for rid, n in users.items() if n > 1)
    answered = _answered(entries)
    for item in session.inputs:
        if item.seq is None:
            found.unacknowledged.append(item.request_id)
            continue
        found.acknowledged += 1
        if in_ledger.get(item.request_id) != item.seq:
            found.lost.append(item.request_id)
        elif item.request_id not in users:
            found.missing_from_transcript.append(item.request_id)
        elif item.seq not in answered:
            found.unanswered.append(item.request_id)


async def audit(client: httpx.AsyncClient, sessions: list[SessionLoad]) -> Audit:
    found = Audit()
    limit = asyncio.Semaphore(10)

    async def one(session: SessionLoad) -> None:
        async with limit:
            await _audit_session(client, session, found)

    await asyncio.gather(*(one(session) for session in sessions))
    return found


async def settle(
    client: httpx.AsyncClient, sessions: list[SessionLoad], timeout_s: float
) -> tuple[Audit, float]:
    """Audit until nothing acknowledged is unanswered or missing, or the deadline; the last
    audit and how long the wait took."""
    started = time.monotonic()
    while True:
        found = await audit(client, sessions)
        pending = found.unanswered or found.missing_from_transcript
        if not pending or time.monotonic() - started > timeout_s:
            return found, time.monotonic() - started
        await asyncio.sleep(2)


async def verify(env: dict[str, str]) -> Verified:
    """`keel-stream verify --tenant chaos --json`: exit 0 when ledger = topic = read models."""
    started = time.monotonic()
    status, out = await keel("verify", "--tenant", TENANT, "--json", env=env, timeout_s=600)
    took = time.monotonic() - started
    if status != 0 and any(text in out for text in _NO_COMMAND):
        return Verified(available=False, passed=False, seconds=took, output=out)
    return Verified(available=True, passed=status == 0, seconds=took, output=out)
