"""What an operator sees: JSON log lines (with request ids, without escape codes), each process's
own metrics, and a /readyz that tells the truth about the read models and the broker."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

import asyncpg
import httpx
from prometheus_client.parser import text_string_to_metric_families

from keel_stream.api.presence import Running
from keel_stream.api.readiness import BrokerCheck, BrokerProbe, Readiness
from keel_stream.errors import StoreError, StoreUnavailable
from keel_stream.kafka.broker import free_port
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.store import PostgresLedger
from keel_stream.store.keys import PostgresKeyStore
from tests.support.api import serve_api
from tests.support.cli import keel_process
from tests.support.kafka import KafkaServer
from tests.support.relays import RelayProcess, relay_processes
from tests.support.wait import wait_until

OTHERS = ("keel_relay_", "keel_worker_", "keel_projector_", "keel_api_")


def json_entries(text: str) -> list[dict[str, Any]]:
    """Every line of a log, each a JSON object without a terminal escape code (raw or escaped)."""
    assert "\x1b" not in text, text[:2000]
    assert "\\u001b" not in text, text[:2000]
    entries = []
    for line in text.splitlines():
        entry = json.loads(line)
        assert isinstance(entry, dict), line
        entries.append(entry)
    return entries


async def scrape(url: str) -> dict[str, list[Any]]:
    """Metric families by name, each with its samples."""
    async with httpx.AsyncClient(timeout=10) as client:
        text = (await client.get(url)).text
    return {f.name: list(f.samples) for f in text_string_to_metric_families(text)}


def theirs(names: Iterable[str], *mine: str) -> list[str]:
    """The keel families among names that belong to another component than `mine`."""
    return [n for n in names if n.startswith(OTHERS) and not n.startswith(mine)]


async def answers(url: str) -> bool:
    try:
        async with httpx.AsyncClient(timeout=2) as client:
            return (await client.get(url)).status_code < 500
    except httpx.TransportError:
        return False


async def invalid_http(port: int) -> None:
    """Bytes that are no HTTP request: uvicorn logs a warning through the standard library."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"\x16\x03\x01 this is not http\r\n\r\n")
    await writer.drain()
    with contextlib.suppress(ConnectionError):
        await asyncio.wait_for(reader.read(), 10)
    writer.close()


async def test_the_api_process_logs_json_lines_with_request_ids_and_exports_only_its_metrics(
    database_dsn: str, ledger: PostgresLedger, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    await ledger.create_tenant("acme")
    _, key = await PostgresKeyStore(pool).create("acme")
    port, log = free_port(), tmp_path / "api.log"
    env = {"KEEL_DATABASE_URL": database_dsn, "KEEL_DATA_DIR": str(tmp_path)}
    async with keel_process("api", "--port", str(port), env=env, log=log):
        url = f"http://127.0.0.1:{port}"
        await wait_until(lambda: answers(f"{url}/healthz"), 60, "the api")
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=10) as client:
            given = await client.get("/healthz", headers={"X-Request-Id": "req-0001"})
            insane = await client.get("/v1/sessions?limit=1", headers={"X-Request-Id": "a b;c"})
            sid = (await client.post("/v1/sessions")).json()["id"]
            stream_headers = {"X-Request-Id": "stream-0001"}
            async with client.stream(
                "GET", f"/v1/sessions/{sid}/events/stream", headers=stream_headers
            ) as stream:
                assert stream.headers["x-request-id"] == "stream-0001"
            families = await scrape(f"{url}/metrics")
        await invalid_http(port)
    assert given.headers["x-request-id"] == "req-0001"
    generated = insane.headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", generated), generated

    text = log.read_text()
    entries = json_entries(text)
    assert key not in text
    assert "Bearer" not in text
    access = {e["request_id"]: e for e in entries if e.get("event") == "request"}
    assert {k: access["req-0001"][k] for k in ("method", "path", "status")} == {
        "method": "GET",
        "path": "/healthz",
        "status": 200,
    }
    assert access[generated]["path"] == "/v1/sessions", "the query string is never logged"
    assert access["stream-0001"]["stream"] is True
    assert isinstance(access["stream-0001"]["duration_ms"], float)
    assert any(str(e.get("logger", "")).startswith("uvicorn") for e in entries), entries

    assert "keel_api_sse_streams" in families
    assert "python_info" in families, "the platform collector is exported"
    assert theirs(families, "keel_api_") == []


async def test_a_worker_serves_its_own_metrics_on_its_metrics_port(
    database_dsn: str, tmp_path: Path
) -> None:
    port, log = free_port(), tmp_path / "worker.log"
    env = {"KEEL_DATABASE_URL": database_dsn, "KEEL_DATA_DIR": str(tmp_path)}
    url = f"http://127.0.0.1:{port}/metrics"
    async with keel_process("worker", "--metrics-port", str(port), env=env, log=log) as process:
        await wait_until(lambda: answers(url), 60, "the worker's metrics")
        families = await scrape(url)
        await proc_stop(process)
    assert "keel_worker_active_runs" in families
    assert theirs(families, "keel_worker_") == []
    json_entries(log.read_text())


async def test_readyz_waits_for_the_read_models_and_each_process_exports_its_own_metrics(
    database_dsn: str, kafka: KafkaServer, topic_prefix: str, tmp_path: Path
) -> None:
    relay_port, projector_port = free_port(), free_port()
    relay = RelayProcess(
        database_dsn, kafka.bootstrap, topic_prefix,
        KEEL_METRICS_PORT=str(relay_port), FORCE_COLOR="1",
    )  # fmt: skip
    env = {
        "KEEL_DATABASE_URL": database_dsn,
        "KEEL_KAFKA_BOOTSTRAP": kafka.bootstrap,
        "KEEL_TOPIC_PREFIX": topic_prefix,
        "KEEL_DATA_DIR": str(tmp_path),
        "KEEL_METRICS_PORT": str(projector_port),
    }
    async with (
        serve_api(database_dsn, kafka.bootstrap, topic_prefix) as api,
        api.client() as client,
    ):
        behind = await client.get("/readyz")
        assert behind.status_code == 503, behind.text
        body = behind.json()
        assert body["error"]["code"] == "projection_behind"
        deps = body["dependencies"]
        assert (deps["database"]["ok"], deps["kafka"]["ok"], deps["readModels"]["ok"]) == (
            True,
            True,
            False,
        )
        async with (
            relay_processes(relay),
            keel_process("projections", "run", env=env, log=tmp_path / "projector.log") as proc,
        ):
            await relay.start()

            async def ready() -> bool:
                return (await client.get("/readyz")).status_code == 200

            await wait_until(ready, 120, "/readyz 200 once the projections worker is live")
            sid = (await client.post("/v1/sessions")).json()["id"]
            for text in ("one", "two", "three"):
                await client.post(f"/v1/sessions/{sid}/input", json={"text": text})
            projector_url = f"http://127.0.0.1:{projector_port}/metrics"

            async def caught_up() -> bool:
                families = await scrape(projector_url)
                applied = {
                    s.labels["projection"]: s.value
                    for s in families.get("keel_projector_applied_events", [])
                    if s.name.endswith("_total")
                }
                lags = [s.value for s in families.get("keel_projector_lag_events", [])]
                return applied.get("transcript", 0) >= 3 and bool(lags) and not any(lags)

            await wait_until(caught_up, 60, "the projector's metrics to show the three events")
            projector = await scrape(projector_url)
            relayed = await scrape(f"http://127.0.0.1:{relay_port}/metrics")
            await proc_stop(proc)

            async def group_gone() -> bool:
                deps = (await client.get("/readyz")).json()["dependencies"]
                return deps["readModels"]["live"] is False

            # The embedded broker keeps a member that left in its group: it never says so.
            if kafka.kind != "embedded":
                await wait_until(group_gone, 60, "/readyz to report the group no longer live")
            after = await client.get("/readyz")
    assert after.status_code == 200, "a projector restart does not take the API out of rotation"

    batches = [s for s in projector["keel_projector_batch_seconds"] if s.name.endswith("_count")]
    assert batches
    assert batches[0].value >= 1
    assert theirs(projector, "keel_projector_") == []
    assert "keel_relay_backlog_events" in relayed
    assert theirs(relayed, "keel_relay_") == []
    json_entries(b"".join(relay.lines).decode())
    json_entries((tmp_path / "projector.log").read_text())


async def proc_stop(process: asyncio.subprocess.Process) -> None:
    process.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(process.wait(), 60) == 0


async def test_a_crashing_projector_logs_its_traceback_as_json_lines_despite_force_color(
    empty_database_dsn: str, kafka: KafkaServer, topic_prefix: str, tmp_path: Path
) -> None:
    """No schema: the projector cannot read its stored offsets and crashes; Faust logs why, with
    the traceback, through our pipeline (its own would color it for FORCE_COLOR)."""
    env = {
        "KEEL_DATABASE_URL": empty_database_dsn,
        "KEEL_KAFKA_BOOTSTRAP": kafka.bootstrap,
        "KEEL_TOPIC_PREFIX": topic_prefix,
        "KEEL_DATA_DIR": str(tmp_path),
    }
    log = tmp_path / "projector.log"
    async with keel_process("projections", "run", env=env, log=log) as process:
        status = await asyncio.wait_for(process.wait(), 120)
    assert status == 1
    entries = json_entries(log.read_text())
    crashes = [e for e in entries if "Traceback" in str(e.get("exception", ""))]
    assert crashes, entries
    assert str(crashes[0]["logger"]).startswith("faust")
    assert "projection_generations" in crashes[0]["exception"]


class ScriptedProbe(BrokerProbe):
    """The broker's answers, as the test sets them."""

    def __init__(self) -> None:
        super().__init__(KafkaSettings("unused:9092"), "keel-projections")
        self.answer = BrokerCheck(answers=True, cluster="c1", group_live=False)

    async def check(self) -> BrokerCheck:
        return self.answer


class Schema:
    def __init__(self, version: int | None = 7, error: StoreError | None = None) -> None:
        self._version, self._error = version, error

    async def schema_version(self) -> int | None:
        if self._error is not None:
            raise self._error
        return self._version


async def test_the_read_models_gate_opens_once_per_broker_incarnation() -> None:
    probe = ScriptedProbe()
    readiness = Readiness(KafkaSettings("unused:9092"), "keel-projections", probe=probe)

    async def report(schema: Schema | None = None) -> tuple[bool, dict[str, Any]]:
        result = await readiness.report(cast(Any, schema or Schema()), True, Running())
        return result.ready, result.body

    ready, body = await report()
    assert (ready, body["error"]["code"]) == (False, "projection_behind")
    probe.answer = BrokerCheck(answers=True, cluster="c1", group_live=True)
    assert (await report())[0]
    probe.answer = BrokerCheck(answers=True, cluster="c1", group_live=False)
    ready, body = await report()
    assert ready, "a rebalance or a projector restart keeps the gate open"
    assert body["dependencies"]["readModels"]["live"] is False
    probe.answer = BrokerCheck(answers=False, cluster=None, group_live=None, error="refused")
    ready, body = await report()
    assert (ready, body["kafka"], body["dependencies"]["kafka"]["liveSource"]) == (
        True,
        False,
        False,
    )
    probe.answer = BrokerCheck(answers=True, cluster="c2", group_live=False)
    assert not (await report())[0], "another incarnation: the projector must be live on it"
    probe.answer = BrokerCheck(answers=True, cluster="c2", group_live=True)
    assert (await report())[0]
    ready, body = await report(Schema(error=StoreUnavailable("connection refused")))
    assert (ready, body["error"]["code"]) == (False, "store_unavailable")
    ready, body = await report(Schema(version=None))
    assert body["dependencies"]["database"] == {
        "ok": False,
        "schemaVersion": None,
        "error": "the schema is not migrated",
    }
