"""The pure parts of running Apache Kafka: the properties written, the pin, the Java check."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from keel_stream.kafka import apache_resolve
from keel_stream.kafka.apache import (
    ApacheKafka,
    errors_in_log,
    jvm_options,
    new_cluster_id,
    render_properties,
    server_properties,
)
from keel_stream.kafka.apache_resolve import (
    LOG4J_CONFIG,
    POM,
    cache_root,
    is_cached,
    lib_dir,
    parse_java_major,
    pinned_version,
    resolve,
)


def test_one_node_is_broker_and_controller_on_the_given_loopback_ports(tmp_path: Path) -> None:
    props = server_properties(tmp_path, 19092, 19093)
    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == "1"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert props["controller.listener.names"] == "CONTROLLER"
    assert props["log.dirs"] == str(tmp_path / "data")


def test_single_replica_settings_and_explicit_topics_like_compose(tmp_path: Path) -> None:
    props = server_properties(tmp_path, 1, 2)
    for key in (
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "min.insync.replicas",
        "default.replication.factor",
    ):
        assert props[key] == "1", key
    assert props["auto.create.topics.enable"] == "false"
    assert props["group.initial.rebalance.delay.ms"] == "0"


def test_compose_and_the_test_broker_agree_where_both_set_a_key(tmp_path: Path) -> None:
    compose = (Path(__file__).resolve().parents[2] / "compose" / "docker-compose.yml").read_text()
    props = server_properties(tmp_path, 1, 2)
    addresses = {
        "listeners",
        "advertised.listeners",
        "controller.quorum.voters",
        "log.dirs",
        "node.id",
    }
    # compose runs three brokers with SCRAM on a client listener, the test broker one, plaintext:
    # replication and listener settings differ by design (tests/unit/test_compose.py checks them).
    cluster_shape = re.compile(r"replication|insync|min\.isr|listener|unclean")
    compared = []
    for name, value in re.findall(r"^\s+KAFKA_([A-Z_]+): \"?([^\s\"]+)\"?\s*$", compose, re.M):
        key = name.lower().replace("_", ".")
        if key not in addresses and not cluster_shape.search(key) and key in props:
            assert props.get(key) == value, f"{key}: compose {value}, test broker {props.get(key)}"
            compared.append(key)
    assert len(compared) >= 2, compared


def test_properties_render_one_line_each_and_escape_backslashes() -> None:
    text = render_properties({"a.b": "1", "log.dirs": "C:\\kafka", "x": "two\nlines"})
    assert text == "a.b=1\nlog.dirs=C:\\\\kafka\nx=two\\nlines\n"


def test_cluster_ids_are_22_url_safe_characters_never_starting_with_a_dash() -> None:
    ids = {new_cluster_id() for _ in range(500)}
    assert len(ids) == 500
    for cluster_id in ids:
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id), cluster_id
        assert not cluster_id.startswith("-")


def test_jvm_options_keep_the_heap_small_and_point_log4j_at_the_shipped_config() -> None:
    options = jvm_options()
    assert "-Xmx512m" in options
    assert "-Xms256m" in options
    assert f"-Dlog4j2.configurationFile={LOG4J_CONFIG}" in options
    assert LOG4J_CONFIG.is_file()


def test_the_pom_pins_a_kafka_4_version_and_the_server_jar() -> None:
    version = pinned_version()
    assert re.fullmatch(r"4\.\d+\.\d+", version), version
    pom = POM.read_text()
    assert "<artifactId>kafka_2.13</artifactId>" in pom
    assert "<version>${kafka.version}</version>" in pom


def test_a_pom_without_a_pin_is_refused(tmp_path: Path) -> None:
    pom = tmp_path / "pom.xml"
    pom.write_text("<project></project>")
    with pytest.raises(apache_resolve.ResolveError, match=r"kafka\.version"):
        pinned_version(pom)


@pytest.mark.parametrize(
    ("output", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment', 17),
        ('openjdk version "25" 2025-09-16', 25),
        ('java version "1.8.0_392"', 8),
        ('openjdk version "11.0.2" 2019-01-15', 11),
        ("no java here", None),
    ],
)
def test_java_major_version_is_read_from_java_version_output(
    output: str, major: int | None
) -> None:
    assert parse_java_major(output) == major


def test_the_cache_follows_xdg_cache_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_root() == tmp_path / "keel-stream"
    assert lib_dir("4.9.9") == tmp_path / "keel-stream" / "kafka-4.9.9" / "lib"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_root() == Path.home() / ".cache" / "keel-stream"


def test_jars_count_as_cached_only_once_the_marker_is_written(tmp_path: Path) -> None:
    lib = lib_dir("4.9.9", tmp_path)
    lib.mkdir(parents=True)
    (lib / "kafka_2.13-4.9.9.jar").write_bytes(b"")
    assert not is_cached("4.9.9", tmp_path), "an unmarked (interrupted) download is redone"
    (lib.parent / "complete").write_text("kafka_2.13-4.9.9.jar\n")
    assert is_cached("4.9.9", tmp_path)
    assert resolve("4.9.9", tmp_path) == lib


def test_without_java_the_rung_says_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert apache_resolve.unavailable("4.9.9", tmp_path) == (
        "no Java: neither $JAVA_HOME/bin/java nor java on PATH"
    )
    with pytest.raises(apache_resolve.ResolveError, match="no Java"):
        resolve("4.9.9", tmp_path)


def test_an_old_java_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text("#!/bin/sh\necho 'openjdk version \"11.0.2\" 2019-01-15' >&2\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    reason = apache_resolve.unavailable("4.9.9", tmp_path / "cache")
    assert reason is not None
    assert "Java 11" in reason
    assert ">= 17" in reason


def test_without_maven_an_uncached_version_says_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    java = apache_resolve.find_java()
    assert java is not None, "this test needs the machine's Java 17"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "java").symlink_to(java)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert "no Maven" in (apache_resolve.unavailable("4.9.9", tmp_path / "cache") or "")


def test_a_new_server_takes_free_ports_and_the_pinned_version(tmp_path: Path) -> None:
    server = ApacheKafka(tmp_path / "kafka")
    assert server.version == pinned_version()
    assert server.port != server.controller_port
    assert server.bootstrap == f"127.0.0.1:{server.port}"
    assert server.log_path == tmp_path / "kafka" / "server.log"
    assert not server.formatted
    assert not server.running
    server.stop()  # stopping what never started is harmless
    assert not list(tmp_path.iterdir()), "nothing is written before start()"


def test_a_failed_start_is_explained_by_its_error_entries_not_stack_frames(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(
        "[2026-01-01 00:00:00,000] INFO old run (kafka.Kafka$)\n"
        "[2026-01-01 00:00:01,000] ERROR Unable to start acceptor for PLAINTEXT (kafka.network)\n"
        "org.apache.kafka.common.KafkaException: Socket server failed to bind: Address in use.\n"
        "\tat kafka.network.Acceptor.openServerSocket(SocketServer.scala:1)\n"
        "[2026-01-01 00:00:02,000] INFO shutting down (kafka.server.BrokerServer)\n"
        "Error occurred during initialization of VM\n"
    )
    found = errors_in_log(log).splitlines()
    assert found == [
        "[2026-01-01 00:00:01,000] ERROR Unable to start acceptor for PLAINTEXT (kafka.network)",
        "org.apache.kafka.common.KafkaException: Socket server failed to bind: Address in use.",
        "Error occurred during initialization of VM",
    ]
    start = len(log.read_bytes())
    assert errors_in_log(log, start) == "", "only what this run logged"
    assert errors_in_log(tmp_path / "missing.log") == ""


def test_keel_test_kafka_forces_a_rung_and_refuses_unknown_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.support.kafka import kafka_plan

    monkeypatch.setenv("KEEL_TEST_KAFKA", "embedded")
    assert kafka_plan() == "embedded broker (KEEL_TEST_KAFKA=embedded)"
    monkeypatch.setenv("KEEL_TEST_KAFKA", "Apache")
    assert kafka_plan() == f"apache-kafka {pinned_version()} (maven; KEEL_TEST_KAFKA=apache)"
    monkeypatch.setenv("KEEL_TEST_KAFKA", "tansu")
    with pytest.raises(RuntimeError, match="expected one of auto, apache, embedded"):
        kafka_plan()
