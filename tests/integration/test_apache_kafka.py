"""Apache Kafka from Maven Central as one KRaft node: it starts, answers, keeps its data across a
restart on the same directory, reports a failed start with its log, and leaves no process."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import NewTopic

from keel_stream.kafka.admin import admin_client
from keel_stream.kafka.apache import ApacheKafka
from keel_stream.kafka.broker import free_port
from keel_stream.kafka.settings import KafkaSettings


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def _accepts(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


async def _create(bootstrap: str, topic: str, partitions: int) -> None:
    async with admin_client(KafkaSettings(bootstrap)) as admin:
        response = await admin.create_topics([NewTopic(topic, partitions, 1)])
    assert [error[1] for error in response.topic_errors] == [0]


async def _produce(bootstrap: str, topic: str, count: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        for i in range(count):
            await producer.send(topic, f"v{i}".encode(), key=f"k{i % 7}".encode())
        await producer.flush()
    finally:
        await producer.stop()


async def _read_all(bootstrap: str, topic: str, partitions: int, count: int) -> list[bytes]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    values: list[bytes] = []
    try:
        assigned = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assigned)
        await consumer.seek_to_beginning(*assigned)
        for _ in range(100):  # 100 polls of at most 200 ms: a 20 s deadline
            if len(values) >= count:
                break
            batches = await consumer.getmany(timeout_ms=200)
            values += [r.value for records in batches.values() for r in records]
    finally:
        await consumer.stop()
    return values


async def test_it_starts_answers_and_stops_leaving_no_process(tmp_path: Path) -> None:
    server = ApacheKafka(tmp_path / "kafka", log_path=tmp_path / "kafka.log")
    try:
        bootstrap = server.start()
        assert server.running
        pgid = server.pid
        assert pgid is not None
        async with admin_client(KafkaSettings(bootstrap)) as admin:
            cluster = await admin.describe_cluster()
        assert [(b["host"], b["port"]) for b in cluster["brokers"]] == [("127.0.0.1", server.port)]
        await _create(bootstrap, "answers", 2)
        await _produce(bootstrap, "answers", 20)
        assert sorted(await _read_all(bootstrap, "answers", 2, 20)) == sorted(
            f"v{i}".encode() for i in range(20)
        )
    finally:
        server.stop()
    assert not server.running
    assert _group_gone(pgid), "the broker's process group must be gone"
    assert not _accepts(server.port)
    assert not _accepts(server.controller_port)
    assert "Kafka Server started" in (tmp_path / "kafka.log").read_text()


async def test_a_restart_on_the_same_data_dir_keeps_a_topics_records(tmp_path: Path) -> None:
    data = tmp_path / "kafka"
    first = ApacheKafka(data)
    try:
        await _create(first.start(), "durable", 3)
        await _produce(first.bootstrap, "durable", 60)
    finally:
        first.stop()
    meta = (data / "data" / "meta.properties").read_text()

    second = ApacheKafka(data)  # another process, other ports, the same directory
    try:
        assert second.formatted
        bootstrap = second.start()
        pgid = second.pid
        assert pgid is not None
        values = await _read_all(bootstrap, "durable", 3, 60)
        async with admin_client(KafkaSettings(bootstrap)) as admin:
            assert "durable" in await admin.list_topics()
    finally:
        second.stop()
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(60))
    assert (data / "data" / "meta.properties").read_text() == meta, "never formatted again"
    assert _group_gone(pgid)


def test_a_failed_start_raises_with_the_logs_tail_and_leaves_no_process(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = ApacheKafka(tmp_path / "kafka", port=port, controller_port=free_port())
        try:
            with pytest.raises(RuntimeError, match="did not start") as failure:
                server.start(timeout_s=90)
        finally:
            server.stop()
    assert "last lines of" in str(failure.value)
    assert "Address already in use" in str(failure.value)
    assert not server.running
