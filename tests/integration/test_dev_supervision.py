"""`keel-stream dev` supervises: each service runs in a process of its own and is restarted when it
dies, a dead broker is restarted with its topics refilled from the ledger, a frozen API holds up
neither the worker nor the relay, and a SIGTERM stops everything without a crash reported.

The integration tests share one dev (started once, on the embedded memory-only broker) and run
in file order; the last one stops it. The first tests are the pure parts (restart delays, the
children's environment).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import orjson
import pytest

from keel_stream.dev.children import Restarts
from keel_stream.dev.components import child_environment, metrics_ports
from keel_stream.errors import InvalidSetting
from keel_stream.kafka.partitions import topic_partitions
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.kernel import CommitRequest
from keel_stream.procs import Proc, describe_exit, wait_gone
from keel_stream.settings import KeelSettings
from keel_stream.store import PostgresLedger, pooled
from keel_stream.topics.catalog import CATALOG
from tests.support.cli import run_keel_sync as keel
from tests.support.dev_runs import DevRun, Devs, wait_for

CRASHED = "service exited unexpectedly; restarting it"
RESTARTED = "service restarted"
SERVER_CRASHED = "server exited unexpectedly; restarting it"
ANSWER_S = 90.0
"""A run answered and read back, through a service restart (a SIGKILLed projector's group
member is only dropped at its session timeout, 10 s)."""


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_restart_delays_double_up_to_the_cap_and_start_over_once_a_child_lasted() -> None:
    clock = Clock()
    restarts = Restarts(initial_s=1.0, maximum_s=4.0, stable_s=30.0, clock=clock)
    delays = []
    for _ in range(5):
        restarts.started()
        clock.now += 1  # it died a second after each start
        delays.append(restarts.delay())
    for delay, expected in zip(delays, [1, 2, 4, 4, 4], strict=True):
        assert 0.8 * expected <= delay <= expected  # jittered, capped, never a hot loop
    restarts.started()
    clock.now += 31  # up longer than stable_s: recovered
    assert restarts.delay() <= 1.0
    assert restarts.count == 6


def test_an_exit_is_described_by_its_status_or_signal() -> None:
    assert describe_exit(1) == "exit status 1"
    assert describe_exit(-9) == "signal SIGKILL"


def test_children_get_the_settings_dev_resolved_and_metrics_ports_of_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KEEL_METRICS_PORT", "9300")
    monkeypatch.setenv("KEEL_RELAY_SHARDS", "4")
    monkeypatch.setenv("KEEL_EXTERNAL_CONFIG", "/etc/keel.json")
    settings = KeelSettings(worker_slots=3, topic_prefix="t.")
    env = child_environment(settings, "postgresql://db", "127.0.0.1:9", 8123, os.environ)
    assert env["KEEL_DATABASE_URL"] == "postgresql://db"
    assert env["KEEL_KAFKA_BOOTSTRAP"] == "127.0.0.1:9"
    assert env["KEEL_API_PORT"] == "8123"
    assert env["KEEL_TOPIC_PREFIX"] == "t."
    assert env["KEEL_WORKER_SLOTS"] == "3"
    assert env["KEEL_RELAY_SHARDS"] == "1", "dev's one relay serves every shard"
    assert env["KEEL_EXTERNAL_CONFIG"] == "/etc/keel.json"
    assert Path(env["KEEL_DATA_DIR"]).is_absolute()
    assert "KEEL_METRICS_PORT" not in env, "each child that serves metrics gets a port of its own"
    assert metrics_ports(settings) == {
        "projector": 9300,
        "relay": 9301,
        "worker": 9302,
        "hooks": 9303,
        "triggers": 9304,
    }
    with pytest.raises(InvalidSetting):
        metrics_ports(KeelSettings(metrics_port=65534))


@pytest.fixture(scope="module")
def devs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Devs]:
    # Not under pytest's own temporary root (see test_dev_lifecycle).
    data = Path(tempfile.mkdtemp(prefix="keel-dev-supervision-"))
    state = Devs(data / "keel", tmp_path_factory.mktemp("dev-supervision"))
    try:
        yield state
    finally:
        state.kill_everything()
        shutil.rmtree(data, ignore_errors=True)


def answered(run: DevRun, text: str) -> None:
    """Through the API: a new session's input is answered (run.finished) and the transcript
    reads it back at the last seq."""
    with run.client() as client:
        wait_for(lambda: _answers(client), ANSWER_S, "the API to answer")
        session = client.post("/v1/sessions").json()["id"]
        client.post(f"/v1/sessions/{session}/input", json={"text": text}).raise_for_status()

        def finished() -> int | None:
            events = client.get(f"/v1/sessions/{session}/events").json()["events"]
            kinds = [e["kind"] for e in events]
            return events[-1]["seq"] if "run.finished" in kinds else None

        last = wait_for(finished, ANSWER_S, "the run to finish")

        def read_back() -> bool:
            read = client.get(
                f"/v1/sessions/{session}/transcript", params={"min_seq": last, "wait_s": 2}
            )
            return read.status_code == 200 and f"echo: {text}" in read.text

        wait_for(read_back, ANSWER_S, "the transcript to hold the answer")


def _answers(client: httpx.Client) -> bool:
    try:
        return client.get("/healthz").status_code == 200
    except httpx.HTTPError:
        return False


def restarted(devs: Devs, name: str, before: Proc) -> Proc:
    """The process recorded for name once it is another one than before, and running."""

    def new() -> Proc | None:
        proc = devs.recorded().get(name)
        return proc if proc is not None and proc != before and proc.alive() else None

    found: Proc = wait_for(new, 60, f"{name} to be restarted")
    return found


@pytest.mark.parametrize("name", ["relay", "worker", "api", "projector"])
def test_a_killed_service_is_restarted_logged_and_the_platform_answers(
    devs: Devs, name: str
) -> None:
    run = devs.running()
    others = {n: p for n, p in devs.recorded().items() if n != name}
    before = devs.recorded()[name]
    os.kill(before.pid, signal.SIGKILL)
    after = restarted(devs, name, before)
    wait_for(lambda: run.logged(RESTARTED, service=name, pid=after.pid), 10, "the restart line")
    (crash,) = run.logged(CRASHED, service=name, pid=before.pid)
    assert crash["level"] == "error"
    assert crash["exit"] == "signal SIGKILL"
    assert crash["restart_in_s"] > 0
    answered(run, f"after {name}")
    assert {n: p for n, p in devs.recorded().items() if n != name} == others, "only it restarts"


def test_a_killed_broker_comes_back_with_its_topics_and_the_ledger_on_them(devs: Devs) -> None:
    run = devs.running()
    answered(run, "before the broker dies")
    recorded = devs.recorded()
    os.kill(recorded["broker"].pid, signal.SIGKILL)
    with run.client() as client:
        # A new (empty) broker: the read models are not ready until the projector is live on it.
        wait_for(lambda: _read_models_not_ready(client), 60, "/readyz to close on the new broker")
    restarted(devs, "broker", recorded["broker"])
    wait_for(lambda: run.logged("server restarted", server="broker"), 60, "the broker's restart")
    (crash,) = run.logged(SERVER_CRASHED, server="broker")
    assert (crash["level"], crash["exit"]) == ("error", "signal SIGKILL")
    bootstrap = devs.addresses()["kafka_bootstrap"]
    names = [spec.full_name() for spec in CATALOG]
    partitions = asyncio.run(topic_partitions(KafkaSettings(bootstrap), names))
    counts = {name: sum(1 for tp in partitions if tp.topic == name) for name in names}
    assert counts == {spec.full_name(): spec.partitions for spec in CATALOG}
    restarted(devs, "projector", recorded["projector"])  # resumes on the new broker's offsets
    answered(run, "after the broker died")
    verified = keel("verify", "--json", env=devs.env, timeout_s=120)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert orjson.loads(verified.stdout)["ok"] is True
    with run.client() as client:
        wait_for(lambda: client.get("/readyz").status_code == 200, 60, "/readyz to say ready")


def _read_models_not_ready(client: httpx.Client) -> bool:
    ready = client.get("/readyz")
    models = ready.json()["dependencies"]["readModels"]
    return ready.status_code == 503 and models["ok"] is False


async def _commit_input(dsn: str, text: str) -> str:
    async with pooled(dsn) as pool:
        ledger = PostgresLedger(pool)
        session = await ledger.create_session("dev")
        await ledger.commit(
            CommitRequest(
                tenant_id="dev",
                session_id=session,
                kind="user.message",
                payload={"text": text},
                key=f"frozen-{session}",
            )
        )
        return session


async def _finished(dsn: str, session: str) -> bool:
    conn = await asyncpg.connect(dsn)
    try:
        kinds = await conn.fetch(
            "SELECT kind FROM events WHERE tenant_id = 'dev' AND session_id = $1", session
        )
        return "run.finished" in [row["kind"] for row in kinds]
    finally:
        await conn.close()


def test_a_frozen_api_holds_up_neither_the_worker_nor_the_relay(devs: Devs) -> None:
    run = devs.running()
    api = devs.recorded()["api"]
    dsn = devs.addresses()["database_url"]
    os.kill(api.pid, signal.SIGSTOP)  # as busy as an API can be: it answers nothing
    try:
        session = asyncio.run(_commit_input(dsn, "while the api is frozen"))
        wait_for(lambda: asyncio.run(_finished(dsn, session)), 60, "the worker to answer")
        verified = keel("verify", "--tenant", "dev", "--session", session, "--json", env=devs.env)
        assert verified.returncode == 0, verified.stdout + verified.stderr
        report = orjson.loads(verified.stdout)
        assert report["counts"]["events"] == report["counts"]["records"] >= 3, report
    finally:
        os.kill(api.pid, signal.SIGCONT)
    assert devs.recorded()["api"] == api, "a frozen API is not a dead one"
    answered(run, "after the thaw")


def test_sigterm_stops_every_child_and_server_and_reports_no_crash(devs: Devs) -> None:
    run = devs.running()
    recorded = devs.recorded()
    logged_before = len(run.dev_log())
    os.kill(run.proc.pid, signal.SIGTERM)
    assert run.proc.wait(timeout=90) == 0, run.err.read_text()[-4000:]
    assert wait_gone(recorded.values(), 5) == []
    assert not (devs.data_dir / "dev.pids.json").exists()
    after = run.dev_log()[logged_before:]
    assert [e for e in after if e["level"] in ("error", "critical")] == [], after
    assert [e["event"] for e in after][-2:] == ["broker stopped", "embedded postgres stopped"]
