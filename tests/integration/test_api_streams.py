"""SSE with partials (real broker and worker), drain on SIGTERM (real api process)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import httpx
from aiokafka import AIOKafkaProducer

from keel_stream.kafka.broker import free_port
from keel_stream.kafka.records import record_key
from keel_stream.kernel import CommitRequest, LeaseToken
from keel_stream.store import PostgresLedger
from keel_stream.store.keys import PostgresKeyStore
from keel_stream.store.runs import PostgresRuns
from keel_stream.topics.catalog import PARTIALS
from keel_stream.topics.records import PartialFrame
from tests.support.api import SseFrame, read_frames, serve_api
from tests.support.kafka import KafkaServer
from tests.support.wait import wait_until
from tests.support.workers import worker_task


def trailing_partials(frames: list[SseFrame]) -> list[SseFrame]:
    """Partial frames sent after the committed assistant.message of their generation."""
    committed: set[object] = set()
    trailing = []
    for frame in frames:
        if frame.event == "assistant.message":
            payload = frame.json()["payload"]
            assert isinstance(payload, dict)
            committed.add(payload.get("generationId"))
        elif frame.event == "partial" and frame.json()["generationId"] in committed:
            trailing.append(frame)
    return trailing


async def test_partials_have_no_id_and_committed_frames_do(
    database_dsn: str, kafka: KafkaServer, topic_prefix: str
) -> None:
    async with (
        serve_api(database_dsn, kafka.bootstrap, topic_prefix) as api,
        worker_task(database_dsn, kafka=kafka.settings, topic_prefix=topic_prefix),
        api.client() as client,
    ):

        async def partials_live() -> bool:
            return bool((await client.get("/v1/capabilities")).json()["features"]["partials"])

        await wait_until(partials_live, 30, "the api's partials consumer")
        sid = (await client.post("/v1/sessions")).json()["id"]
        frames: list[SseFrame] = []
        async with client.stream(
            "GET", f"/v1/sessions/{sid}/events/stream", params={"partials": 1}
        ) as response:
            reading = read_frames(response)
            await client.post(f"/v1/sessions/{sid}/input", json={"text": "[[slow:150]] a b c d"})
            while not frames or frames[-1].event != "run.finished":
                frames.append(await asyncio.wait_for(anext(reading), 30))
    committed = [f for f in frames if f.event != "partial"]
    partials = [f for f in frames if f.event == "partial"]
    assert [(f.id, f.event) for f in committed] == [
        ("1", "user.message"),
        ("2", "assistant.message"),
        ("3", "run.finished"),
    ]
    assert partials, "slow tokens must stream as partials"
    assert all(f.id is None for f in partials)
    assert "echo: a b c d".startswith("".join(str(f.json()["delta"]) for f in partials))
    assert trailing_partials(frames) == []


@contextlib.asynccontextmanager
async def partials_producer(bootstrap: str) -> AsyncIterator[AIOKafkaProducer]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        yield producer
    finally:
        await producer.stop()


async def commit_answer(
    ledger: PostgresLedger, sid: str, lease: LeaseToken, generation: str
) -> None:
    payload = {
        "role": "assistant",
        "content": [{"type": "text", "text": "done"}],
        "inputSeqs": [1],
        "stopReason": "end_turn",
        "generationId": generation,
    }
    await ledger.commit(
        CommitRequest(
            tenant_id="acme",
            session_id=sid,
            kind="assistant.message",
            payload=payload,
            lease=lease,
        )
    )


async def test_partials_never_trail_their_committed_answer(
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
    pool: asyncpg.Pool,
    ledger: PostgresLedger,
) -> None:
    topic = PARTIALS.full_name(topic_prefix)
    async with (
        serve_api(database_dsn, kafka.bootstrap, topic_prefix) as api,
        partials_producer(kafka.bootstrap) as producer,
        api.client() as client,
    ):

        async def partials_live() -> bool:
            return bool((await client.get("/v1/capabilities")).json()["features"]["partials"])

        async def partial(generation: str, index: int, delta: str) -> None:
            frame = PartialFrame(
                tenant="acme", session=sid, generation_id=generation, index=index,
                delta=delta, emitted_at=datetime.now(UTC),
            )  # fmt: skip
            value = frame.model_dump_json().encode()
            await producer.send_and_wait(topic, value=value, key=record_key("acme", sid))

        await wait_until(partials_live, 30, "the api's partials consumer")
        sid = (await client.post("/v1/sessions")).json()["id"]
        await client.post(f"/v1/sessions/{sid}/input", json={"text": "hi"})
        claim = await PostgresRuns(pool, "test-owner", 60).claim()
        assert claim is not None
        async with client.stream(
            "GET", f"/v1/sessions/{sid}/events/stream", params={"partials": 1}
        ) as response:
            frames = read_frames(response)
            seen = [await asyncio.wait_for(anext(frames), 15)]
            await partial("g1", 0, "early")
            seen.append(await asyncio.wait_for(anext(frames), 15))
            await commit_answer(ledger, sid, claim.lease, "g1")
            seen.append(await asyncio.wait_for(anext(frames), 15))
            # One partition for the session: the late g1 partial is consumed before g2's.
            await partial("g1", 1, "late")
            await partial("g2", 0, "next")
            seen.append(await asyncio.wait_for(anext(frames), 15))
    assert [(f.event, f.id) for f in seen] == [
        ("user.message", "1"),
        ("partial", None),
        ("assistant.message", "2"),
        ("partial", None),
    ]
    assert [(f.json()["generationId"], f.json()["delta"]) for f in seen[1::2]] == [
        ("g1", "early"),
        ("g2", "next"),
    ], "the g1 partial that arrived after g1's committed answer was dropped"


async def test_sigterm_sends_unread_events_then_drain(
    database_dsn: str, pool: asyncpg.Pool, ledger: PostgresLedger, tmp_path: Path
) -> None:
    await ledger.create_tenant("acme")
    await ledger.create_session("acme", "s1")
    _, key = await PostgresKeyStore(pool).create("acme")
    port = free_port()
    log = tmp_path / "api.log"
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "keel_stream", "api", "--port", str(port),
            env={**os.environ, "KEEL_DATABASE_URL": database_dsn}, stdout=out, stderr=out,
        )  # fmt: skip
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"}
        ) as client:

            async def up() -> bool:
                try:
                    return (await client.get("/healthz")).status_code == 200
                except httpx.TransportError:
                    return False

            await wait_until(up, 30, "the api process")

            async def say(n: int) -> None:
                await ledger.commit(
                    CommitRequest(
                        tenant_id="acme", session_id="s1", kind="user.message", payload={"n": n}
                    )
                )

            await say(1)
            async with client.stream("GET", "/v1/sessions/s1/events/stream") as response:
                frames = read_frames(response)
                first = await asyncio.wait_for(anext(frames), 10)
                for n in (2, 3, 4):
                    await say(n)
                process.send_signal(signal.SIGTERM)
                rest = [frame async for frame in frames]
        assert await asyncio.wait_for(process.wait(), 30) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert first.id == "1"
    assert [f.id for f in rest[:-1]] == ["2", "3", "4"], log.read_text()
    assert rest[-1].event == "drain"
    assert rest[-1].json() == {"retry_after_ms": 3000}
    assert rest[-1].id is None
