"""Forks: a new session whose log is a copy of another's first N events, both adapters."""

from __future__ import annotations

from typing import Any

import pytest

from keel_stream.errors import (
    ExternalSession,
    InvalidRequest,
    SessionExists,
    SessionNotFound,
)
from keel_stream.kernel import CommitRequest, Event, RunStatus, account_inputs
from keel_stream.store import ExternalMarkers
from keel_stream.worker.loop import AgentLoop, Signals
from keel_stream.worker.partials import PartialsPublisher
from keel_stream.worker.providers import FakeProvider
from tests.contract.conftest import Adapter
from tests.contract.test_store_contract import answer, say, settled_through


async def answered_session(adapter: Adapter) -> None:
    """s1: an input (1) answered (2), a second input (3) answered (4); its run settled done."""
    runs = adapter.runs("w", 10)
    for turn in (1, 2):
        seq = await say(adapter, f"q{turn}", f"r{turn}")
        claim = await runs.claim()
        assert claim is not None
        done = await answer(adapter, claim, [seq], f"g{turn}")
        await runs.settle(claim, settled_through(done))


def copied(event: Event) -> tuple[int, str, dict[str, Any]]:
    return (event.seq, event.kind, event.payload)


async def log(adapter: Adapter, session: str) -> list[Event]:
    return await adapter.ledger.read_events("acme", session, limit=1000)


async def test_a_fork_is_the_source_prefix_with_provenance(adapter: Adapter) -> None:
    await answered_session(adapter)
    source = await log(adapter, "s1")
    for at in range(len(source) + 1):
        fork = await adapter.ledger.fork("acme", "s1", at_seq=at, session_id=f"f{at}")
        assert (fork.session_id, fork.fork_of, fork.at_seq) == (f"f{at}", "s1", at)
        events = await log(adapter, f"f{at}")
        assert [copied(e) for e in events] == [copied(e) for e in source[:at]]
        assert await adapter.ledger.head("acme", f"f{at}") == at
        for original, copy in zip(source, events, strict=False):
            assert copy.metadata is not None
            assert copy.metadata["forkedFrom"]["session"] == "s1"
            assert copy.metadata["forkedFrom"]["seq"] == original.seq
            assert copy.metadata["origin"] == {"session": "s1", "seq": original.seq}
    assert all(e.metadata is None for e in await log(adapter, "s1")), "the source is unchanged"


async def test_a_fork_defaults_to_the_head_and_owes_nothing_when_answered(
    adapter: Adapter,
) -> None:
    await answered_session(adapter)
    fork = await adapter.ledger.fork("acme", "s1")
    assert fork.at_seq == 4
    assert fork.owed_input_seq is None
    assert await adapter.runs("w", 10).claim() is None, "no run for an answered fork"


async def test_a_fork_with_an_unanswered_input_owes_a_run(adapter: Adapter) -> None:
    await answered_session(adapter)
    fork = await adapter.ledger.fork("acme", "s1", at_seq=3, session_id="retry")
    assert fork.owed_input_seq == 3
    claim = await adapter.runs("w", 10).claim()
    assert claim is not None
    assert (claim.session, claim.attempts) == ("retry", 1)


async def test_a_fork_of_a_fork_keeps_the_origin(adapter: Adapter) -> None:
    await answered_session(adapter)
    await adapter.ledger.fork("acme", "s1", at_seq=3, session_id="a")
    await adapter.ledger.fork("acme", "a", at_seq=2, session_id="b")
    events = await log(adapter, "b")
    assert [copied(e) for e in events] == [copied(e) for e in (await log(adapter, "s1"))[:2]]
    for event in events:
        assert event.metadata is not None
        assert event.metadata["forkedFrom"]["session"] == "a"
        assert event.metadata["origin"] == {"session": "s1", "seq": event.seq}


async def test_a_worker_answers_on_a_fork_of_a_session_it_answered(adapter: Adapter) -> None:
    """The fork's answers are its own: none collides with the answers it copied (whose
    epochs and turns count from 1 like the fork's)."""
    runs = adapter.runs("w", 10)
    loop = AgentLoop(adapter.ledger, runs, FakeProvider(), PartialsPublisher(None, "partials"))

    async def answered(session: str, text: str) -> None:
        await adapter.ledger.commit(
            CommitRequest(tenant_id="acme", session_id=session, kind="user.message",
                          payload={"text": text}, key=f"{session}-{text}")
        )  # fmt: skip
        claim = await runs.claim()
        assert claim is not None
        assert claim.session == session
        assert (await loop.run_attempt(claim, Signals())).status is RunStatus.DONE

    for text in ('[[tool:echo {"n": 1}]] q1', "q2", "q3"):
        await answered("s1", text)
    await adapter.ledger.fork("acme", "s1", session_id="f")
    await answered("f", '[[tool:echo {"n": 4}]] q4')
    events = await log(adapter, "f")
    assert account_inputs(events).unanswered == ()
    keys = [e.payload.get("generationId") or e.payload.get("toolCallId") for e in events]
    keyed = [k for k in keys if k is not None]
    assert len(keyed) == len(set(keyed)) == 4 + 4, keyed


async def test_a_fork_keeps_the_idempotency_keys(adapter: Adapter) -> None:
    await answered_session(adapter)
    await adapter.ledger.fork("acme", "s1", at_seq=2, session_id="f")
    retry = CommitRequest(
        tenant_id="acme", session_id="f", kind="user.message", payload={"text": "q1"}, key="r1"
    )
    replayed = await adapter.ledger.commit(retry)
    assert (replayed.created, replayed.seq) == (False, 1)
    new = await adapter.ledger.commit(retry.model_copy(update={"key": "r2"}))
    assert (new.created, new.seq) == (True, 3), "a key of the source past atSeq is free"
    assert await adapter.ledger.head("acme", "s1") == 4, "the source is untouched"


async def test_what_cannot_be_forked_is_refused_and_writes_nothing(adapter: Adapter) -> None:
    await answered_session(adapter)
    await adapter.ledger.create_tenant("other")
    await adapter.ledger.create_session("other", "theirs")
    with pytest.raises(SessionNotFound):
        await adapter.ledger.fork("acme", "nope")
    with pytest.raises(SessionNotFound):
        await adapter.ledger.fork("acme", "theirs")  # another tenant's: not found
    with pytest.raises(InvalidRequest):
        await adapter.ledger.fork("acme", "s1", at_seq=5, session_id="past")
    with pytest.raises(SessionExists):
        await adapter.ledger.fork("acme", "s1", session_id="s1")
    await adapter.ledger.create_session("acme", "ext", external=ExternalMarkers(backend="b"))
    with pytest.raises(ExternalSession):
        await adapter.ledger.fork("acme", "ext", session_id="from-ext")
    for missing in ("past", "from-ext"):
        with pytest.raises(SessionNotFound):
            await adapter.ledger.head("acme", missing)
    assert await adapter.ledger.head("acme", "s1") == 4
