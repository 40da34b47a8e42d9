"""The Kafka door's factory: every client it builds carries the one KafkaSettings' brokers,
client id, timeouts and security (TLS, SASL), and no caller can set those itself."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pytest

from keel_stream.errors import InvalidSetting, MissingKafkaBootstrap
from keel_stream.kafka import clients
from keel_stream.kafka.admin import topic_configs
from keel_stream.kafka.faust_app import faust_broker
from keel_stream.kafka.settings import KafkaSettings, kafka_settings
from keel_stream.settings import KeelSettings
from keel_stream.topics.catalog import EVENTS


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate and its key (PEM), valid for localhost: as a CA and as a client's."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    request = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    subject = ["-subj", "/CN=localhost", "-keyout", str(key), "-out", str(cert)]
    subprocess.run([*request, *subject], check=True, capture_output=True)
    return cert, key


async def test_every_client_gets_the_settings_brokers_id_and_timeout() -> None:
    kafka = KafkaSettings("b1:9092,b2:9092", client_id="prod-keel", request_timeout_s=7)
    kwargs = clients.connection(kafka, "relay")
    assert kwargs == {
        "bootstrap_servers": "b1:9092,b2:9092",
        "client_id": "prod-keel-relay",
        "request_timeout_ms": 7000,
        "security_protocol": "PLAINTEXT",
    }
    producer = clients.producer(kafka, "relay", acks="all")
    assert producer.client._bootstrap_servers == "b1:9092,b2:9092"
    assert producer.client._client_id == "prod-keel-relay"
    await producer.stop()


async def test_the_factory_applies_sasl_scram_over_tls(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    kafka = KafkaSettings(
        "broker:9094",
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="keel",
        sasl_password="s3cret",
        ssl_cafile=cert,
        ssl_certfile=cert,
        ssl_keyfile=key,
    )
    kwargs = clients.connection(kafka, "hooks")
    assert kwargs["security_protocol"] == "SASL_SSL"
    assert kwargs["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (kwargs["sasl_plain_username"], kwargs["sasl_plain_password"]) == ("keel", "s3cret")
    context = kwargs["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert context.cert_store_stats()["x509_ca"] == 1  # the CA file, not the system's store
    for client in (
        clients.producer(kafka, "relay"),
        clients.consumer(kafka, "hooks", group_id="g"),
        clients.admin(kafka, "topics"),
    ):
        inner = client.client if isinstance(client, clients.Producer) else client._client
        assert inner._security_protocol == "SASL_SSL"
        assert inner._sasl_mechanism == "SCRAM-SHA-512"
        assert inner._sasl_plain_username == "keel"
        assert inner._ssl_context is context
        await (client.close() if isinstance(client, clients.Admin) else client.stop())


def test_the_factory_applies_sasl_to_faust() -> None:
    kafka = KafkaSettings(
        "b1:9092, b2:9092",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_username="keel",
        sasl_password="pw",
        session_timeout_s=12,
    )
    broker = faust_broker(kafka, "projector", rebalance_timeout_s=20)
    assert broker["broker"] == ["kafka://b1:9092", "kafka://b2:9092"]
    credentials = broker["broker_credentials"]
    assert credentials.protocol.value == "SASL_PLAINTEXT"
    assert credentials.mechanism.value == "SCRAM-SHA-256"
    assert (credentials.username, credentials.password) == ("keel", "pw")
    assert broker["broker_session_timeout"] == 12
    assert broker["broker_request_timeout"] >= broker["broker_rebalance_timeout"]


def test_a_caller_cannot_set_the_settings_own_keys() -> None:
    with pytest.raises(TypeError, match="security_protocol"):
        clients.producer(KafkaSettings("b:9092"), "relay", security_protocol="PLAINTEXT")


def test_kafka_settings_come_from_the_keel_settings(tmp_path: Path) -> None:
    keel = KeelSettings(
        kafka_bootstrap="b:9093",
        kafka_client_id="staging",
        kafka_security_protocol="SSL",
        kafka_ssl_cafile=tmp_path / "ca.pem",
        kafka_idempotence=False,
        kafka_sasl_password="unused",
    )
    kafka = kafka_settings(keel)
    assert (kafka.bootstrap, kafka.client_id, kafka.security_protocol) == (
        "b:9093",
        "staging",
        "SSL",
    )
    assert kafka.ssl_cafile == tmp_path / "ca.pem"
    assert not kafka.idempotence
    assert "unused" not in repr(kafka)
    assert kafka_settings(keel, "127.0.0.1:1").bootstrap == "127.0.0.1:1"
    with pytest.raises(MissingKafkaBootstrap):
        kafka_settings(KeelSettings(kafka_bootstrap=None))


@pytest.mark.parametrize(
    "wrong",
    [
        {"security_protocol": "SASL_SSL"},  # no username, no password
        {"security_protocol": "SSL", "ssl_certfile": Path("c.pem")},  # a cert without its key
        {"ssl_cafile": Path("ca.pem")},  # TLS files on a PLAINTEXT connection
        {"min_insync_replicas": 2},  # more in sync than there are replicas
    ],
)
def test_inconsistent_security_settings_are_refused(wrong: dict[str, object]) -> None:
    with pytest.raises(InvalidSetting):
        KafkaSettings("b:9092", **wrong)  # type: ignore[arg-type]


def test_topics_are_replicated_as_the_settings_say_and_once_by_default() -> None:
    cluster = kafka_settings(
        KeelSettings(
            kafka_bootstrap="b:9092", kafka_replication_factor=3, kafka_min_insync_replicas=2
        )
    )
    assert (cluster.replication_factor, cluster.min_insync_replicas) == (3, 2)
    assert topic_configs(EVENTS, cluster) == EVENTS.configs() | {"min.insync.replicas": "2"}
    single = kafka_settings(KeelSettings(kafka_bootstrap="b:9092"))
    assert (single.replication_factor, single.min_insync_replicas) == (1, None)
    assert topic_configs(EVENTS, single) == EVENTS.configs()
