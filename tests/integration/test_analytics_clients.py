"""Analytics consumers in other clients read keel.events.v1 in a consumer group: the documented
confluent-kafka consumer (docs/examples/confluent_consumer.py, shown verbatim in docs/topics.md),
Kafka's Java console consumer (the command line docs/topics.md shows) and, where installed,
kcat. Each must see every event as the ledger has it: per session in seq order once
de-duplicated, with the documented key and headers.

These run against Apache Kafka (CI's broker). On the embedded broker (Tansu) only the
confluent-kafka consumer runs, with the session timeout docs/topics.md gives for it.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import shutil
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer

from keel_stream.analytics import SeqDeduplicator
from keel_stream.kafka.admin import describe_topics, high_water_marks
from keel_stream.kafka.apache_resolve import ResolveError, lib_dir, pinned_version, resolve
from keel_stream.kafka.records import EventRecordCodec
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.kernel import CommitRequest, Event
from keel_stream.relay import RelayConfig
from keel_stream.store import PostgresLedger
from keel_stream.topics.catalog import EVENTS
from tests.support.kafka import KafkaServer
from tests.support.ledger import converse_all, make_sessions, outbox_empty
from tests.support.relays import relay_task
from tests.support.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
TOPICS_MD = ROOT / "docs" / "topics.md"
EXAMPLE = ROOT / "docs" / "examples" / "confluent_consumer.py"
SessionKey = tuple[str, str]
RESENT_SEQS = range(3, 6)
"""Seqs of acme/s00 produced a second time, as a relay that crashed after the ack re-sends."""
ON_APACHE_ONLY = "needs Apache Kafka (KEEL_TEST_KAFKA=apache): docs/topics.md says why"
PROTOCOLS = ["classic", "consumer"]
"""Group protocols: the classic one and KIP-848's (group.protocol=consumer)."""


@dataclass(frozen=True)
class Published:
    """What the ledger committed and the relay published, plus the re-sent duplicates."""

    bootstrap: str
    prefix: str
    ledger: dict[SessionKey, list[Event]]
    resent: dict[int, int]
    """Per partition, how many duplicate records were produced after the originals."""
    records: int
    """Records on the topic (from the high-water marks): each event once, plus the re-sent."""

    @property
    def topic(self) -> str:
        return EVENTS.full_name(self.prefix)

    @property
    def events(self) -> int:
        return sum(len(events) for events in self.ledger.values())


@dataclass(frozen=True)
class Row:
    """One record as a client printed it."""

    partition: int
    key: str
    headers: dict[str, str]
    event: Event


async def _resend(bootstrap: str, topic: str, events: Iterable[Event]) -> dict[int, int]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    resent: dict[int, int] = defaultdict(int)
    await producer.start()
    try:
        for e in events:
            record = EventRecordCodec.encode(
                e.tenant, e.session, e.seq, e.kind, e.payload, e.committed_at
            )
            sent = await producer.send_and_wait(
                topic, record.value, key=record.key, headers=record.headers
            )
            resent[sent.partition] += 1
    finally:
        await producer.stop()
    return dict(resent)


@pytest.fixture
async def published(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
) -> Published:
    """Three agent sessions and another tenant's session, committed and published by the relay;
    then three of s00's events once more."""
    sessions = await make_sessions(ledger, 3)
    await converse_all(ledger, pool, sessions, cycles=2)
    await ledger.create_tenant("globex")
    await ledger.create_session("globex", "g1")
    for n in range(3):
        await ledger.commit(
            CommitRequest(
                tenant_id="globex", session_id="g1", kind="user.message", payload={"n": n}
            )
        )
    async with relay_task(RelayConfig(database_dsn, kafka.settings, topic_prefix)):
        await wait_until(lambda: outbox_empty(pool), 60, "the outbox to drain")
    keys = [("acme", s) for s in sessions] + [("globex", "g1")]
    history = {key: await ledger.read_events(*key, limit=100) for key in keys}
    topic = EVENTS.full_name(topic_prefix)
    again = [e for e in history[("acme", "s00")] if e.seq in RESENT_SEQS]
    resent = await _resend(kafka.bootstrap, topic, again)
    records = sum((await high_water_marks(kafka.settings, topic)).values())
    return Published(kafka.bootstrap, topic_prefix, history, resent, records)


def assert_as_in_the_ledger(events: Iterable[Event], published: Published) -> None:
    """De-duplicated as docs/topics.md says, each session holds its ledger events in order."""
    seen = SeqDeduplicator()
    by_session: dict[SessionKey, list[Event]] = defaultdict(list)
    for event in events:
        if seen.admit(event.tenant, event.session, event.seq):
            by_session[event.key].append(event)
    assert set(by_session) == set(published.ledger)
    for key, expected in published.ledger.items():
        assert by_session[key] == expected, key


def assert_records(rows: list[Row], published: Published) -> None:
    """Every record on the topic (duplicates too), with the documented key and headers."""
    assert len(rows) == published.records
    partitions: dict[SessionKey, set[int]] = defaultdict(set)
    for row in rows:
        e = row.event
        assert row.key == f"{e.tenant}/{e.session}"
        assert row.headers == {
            "tenant": e.tenant, "session": e.session, "seq": str(e.seq), "kind": e.kind,
        }  # fmt: skip
        partitions[e.key].add(row.partition)
    assert all(len(p) == 1 for p in partitions.values()), partitions
    assert_as_in_the_ledger((row.event for row in rows), published)


async def committed_lag(published: Published, group: str) -> dict[int, tuple[int | None, int]]:
    """Per partition of the events topic: (the group's committed offset, high-water mark)."""
    states = await describe_topics(KafkaSettings(published.bootstrap), published.prefix, [group])
    return {
        s.partition: (s.committed[group], s.high_water)
        for s in states
        if s.topic == published.topic
    }


async def run(argv: list[str], env: dict[str, str] | None = None) -> tuple[str, str]:
    """Run a client to its end (bounded); its stdout and stderr. A failure shows both."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), 90)
    except TimeoutError:
        process.kill()
        out, err = await process.communicate()
        raise AssertionError(f"{argv[0]} did not finish:\n{out.decode()}\n{err.decode()}") from None
    assert process.returncode == 0, f"exit {process.returncode}:\n{out.decode()}\n{err.decode()}"
    return out.decode(), err.decode()


def doc_block(language: str, containing: str) -> str:
    """The one fenced block of docs/topics.md in `language` that contains `containing`."""
    blocks = re.findall(rf"```{language}[^\n]*\n(.*?)```", TOPICS_MD.read_text(), re.DOTALL)
    (block,) = [b for b in blocks if containing in b]
    return str(block)


@pytest.fixture(params=PROTOCOLS)
def protocol(request: pytest.FixtureRequest, kafka: KafkaServer) -> str:
    """A group protocol the broker has (set up before `published`, so a skip costs nothing)."""
    if kafka.kind == "embedded" and request.param == "consumer":
        pytest.skip(f"the embedded broker has no KIP-848 group protocol; {ON_APACHE_ONLY}")
    return str(request.param)


def test_docs_show_the_example_that_runs() -> None:
    text = TOPICS_MD.read_text()
    assert doc_block("python", "confluent_kafka") == EXAMPLE.read_text()
    assert "](examples/confluent_consumer.py)" in text
    assert "keel-stream dev --kafka apache" in text


async def test_confluent_kafka_consumer_in_a_group_reads_every_event(
    protocol: str, kafka: KafkaServer, published: Published
) -> None:
    settings = ["-X", f"group.protocol={protocol}"]
    if kafka.kind == "embedded":
        settings += ["-X", "session.timeout.ms=6000"]  # the group join waits half of it there
    group = f"analytics-{secrets.token_hex(4)}"
    argv = [sys.executable, str(EXAMPLE), "--bootstrap", published.bootstrap, "--group", group]
    argv += ["--max-events", str(published.events), *settings]
    out, err = await run(argv, env={"KEEL_TOPIC_PREFIX": published.prefix})
    events = [Event.model_validate_json(line) for line in out.splitlines()]
    assert len(events) == published.events, "the duplicates were dropped"
    assert_as_in_the_ledger(events, published)
    assert "gap:" not in err
    # The offsets it committed cover every event it printed; a re-sent duplicate past the last
    # original of its partition may be unread when it stops.
    for partition, (committed, high) in (await committed_lag(published, group)).items():
        assert committed is not None or high == 0, partition
        assert high - published.resent.get(partition, 0) <= (committed or 0) <= high, partition


def parse_console_line(line: str) -> Row:
    """Partition:<p> TAB <k:v,...> TAB <key> TAB <value>, as the docs' command prints."""
    partition, headers, key, value = line.split("\t", 3)
    pairs = (h.split(":", 1) for h in headers.split(","))
    return Row(
        partition=int(partition.removeprefix("Partition:")),
        key=key,
        headers=dict(pairs),
        event=Event.model_validate_json(value),
    )


_DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
"""The version the broker's pom already uses, so no other is resolved."""


def _fetch_tools_jar(version: str, target: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        pytest.fail("no mvn to fetch org.apache.kafka:kafka-tools (the console consumer)")
    partial = target.with_name(f"{target.name}.{secrets.token_hex(4)}")
    artifact = f"-Dartifact=org.apache.kafka:kafka-tools:{version}"
    subprocess.run(
        [mvn, "-q", "-B", f"{_DEPENDENCY_PLUGIN}:copy", artifact, f"-DoutputDirectory={partial}"],
        check=True, capture_output=True, timeout=600, cwd=partial.parent,
    )  # fmt: skip
    try:
        partial.rename(target)
    except OSError:  # another session fetched it meanwhile
        shutil.rmtree(partial, ignore_errors=True)


@pytest.fixture(scope="session")
def kafka_classpath(kafka: KafkaServer) -> str:
    """The Java client and Kafka's tools: the server's jars plus kafka-tools (the console
    consumer), fetched from Maven beside them the first time."""
    if kafka.kind == "embedded":
        pytest.skip(f"the suite resolves the Java client only with Apache Kafka; {ON_APACHE_ONLY}")
    version = kafka.version if kafka.kind == "apache" and kafka.version else pinned_version()
    try:
        lib = resolve(version)
    except ResolveError as exc:
        pytest.skip(f"no Apache Kafka jars here for the Java client: {exc}")
    if any(lib.glob("kafka-tools-[0-9]*.jar")):
        return f"{lib}/*"
    tools = lib_dir(version).parent / "tools"
    if not any(tools.glob("kafka-tools-[0-9]*.jar")):
        _fetch_tools_jar(version, tools)
    return f"{lib}/*:{tools}/*"


async def test_java_console_consumer_in_a_group_reads_every_event(
    kafka_classpath: str, protocol: str, published: Published
) -> None:
    group = f"analytics-{secrets.token_hex(4)}"
    command = doc_block("sh", "ConsoleConsumer").replace("my-analytics", group)
    records = published.records
    limits = f"--max-messages {records} --timeout-ms 30000"
    script = f"{command.rstrip()} {limits} --command-property group.protocol={protocol}"
    env = {
        "KAFKA_CLASSPATH": kafka_classpath,
        "KEEL_KAFKA_BOOTSTRAP": published.bootstrap,
        "KEEL_TOPIC_PREFIX": published.prefix,
    }
    out, err = await run(["bash", "-euo", "pipefail", "-c", script], env=env)
    assert f"Processed a total of {records} messages" in err
    assert_records([parse_console_line(line) for line in out.splitlines()], published)
    lag = await committed_lag(published, group)
    assert all((committed or 0) == high for committed, high in lag.values()), lag


def parse_kcat_line(line: str) -> Row:
    """<p> TAB <key> TAB <k=v,...> TAB <value>, as the docs' kcat format prints."""
    partition, key, headers, value = line.split("\t", 3)
    pairs = (h.split("=", 1) for h in headers.split(","))
    return Row(int(partition), key, dict(pairs), Event.model_validate_json(value))


@pytest.fixture
def kcat(kafka: KafkaServer) -> str:
    found = shutil.which("kcat")
    if found is None:
        pytest.skip("kcat is not installed (optional; the Java console consumer always runs)")
    if kafka.kind == "embedded":
        pytest.skip(f"kcat cannot negotiate ApiVersions with the embedded broker; {ON_APACHE_ONLY}")
    return found


async def test_kcat_in_a_group_reads_every_event(kcat: str, published: Published) -> None:
    group = f"analytics-{secrets.token_hex(4)}"
    command = doc_block("sh", "kcat ").replace("my-analytics", group)
    records = published.records
    env = {"KEEL_KAFKA_BOOTSTRAP": published.bootstrap, "KEEL_TOPIC_PREFIX": published.prefix}
    out, _ = await run(["bash", "-euo", "pipefail", "-c", f"{command.rstrip()} -c {records}"], env)
    assert_records([parse_kcat_line(line) for line in out.splitlines()], published)
