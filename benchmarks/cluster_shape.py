"""The production shape on one machine, for the cluster chaos run: no Docker, loopback ports.

- Kafka: three Apache Kafka KRaft nodes (Maven Central), SASL/SCRAM on the client listener,
  topics replicated three times with two in sync (keel_stream.kafka.apache_cluster);
- PostgreSQL: a pg_auto_failover formation, a primary and a synchronous standby, reached with a
  multi-host DSN (`target_session_attrs=read-write`; keel_stream.dev.pg_failover);
- two API replicas behind HAProxy (keel_stream.dev.haproxy), two workers, two relay shards of two
  relays each (one holds the shard's lock, one stands by), two projector instances, two hook
  senders and two trigger schedulers, each an OS process under the
  chaos run's small supervisor (benchmarks.chaos_cluster.Service: restarted after it exits).

Every service reads the same KEEL_* environment a deployment would set (docs/deployment.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Final

import httpx

from benchmarks.chaos_cluster import Crash, Service, create_api_key, keel_ok, supervised
from keel_stream.dev.haproxy import Haproxy, Replica, haproxy_version
from keel_stream.dev.pg_failover import FailoverFormation
from keel_stream.dev.readiness import Readiness, wait_projector_live
from keel_stream.kafka.apache_cluster import ApacheKafkaCluster
from keel_stream.kafka.broker import free_port
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.topics.groups import projector_group

__all__ = ["REPLICAS", "ProductionShape", "engine_versions"]

REPLICAS: Final = 2
"""Instances of each service, relay shards, and relays per shard (as compose runs them)."""
_READY_S: Final = 180.0
_COMMANDS: Final = {
    "worker": ("worker",),
    "projector": ("projections", "run"),
    "hooks": ("hooks", "run"),
    "scheduler": ("triggers", "run"),
}


def engine_versions(shape: ProductionShape) -> dict[str, str]:
    """What runs: the engines' own versions, as the CI log should show them."""
    return {
        "kafka": f"apache-kafka {shape.kafka.version} x3 (KRaft, SASL {shape.kafka.mechanism})",
        "postgresql": shape.postgres_version,
        "haproxy": haproxy_version(),
    }


class ProductionShape:
    """Start with `await start()`, stop with `await close()` (everything, whatever failed)."""

    def __init__(self, root: Path, restart_after_s: float) -> None:
        self.root = root
        (root / "logs").mkdir(parents=True, exist_ok=True)
        self.kafka = ApacheKafkaCluster(root / "kafka")
        # Its own directory: its PostgreSQL runs as the postgres user, who may not enter root's.
        self.formation = FailoverFormation()
        self.api_ports = [free_port() for _ in range(REPLICAS)]
        self.balancer = Haproxy(
            root / "haproxy",
            [Replica(f"api-{i + 1}", port) for i, port in enumerate(self.api_ports)],
        )
        self.restart_after_s = restart_after_s
        self.services: dict[str, Service] = {}
        self.crashes: list[Crash] = []
        self.epoch = time.monotonic()
        self.key = ""
        self.postgres_version = ""

    @property
    def api_url(self) -> str:
        return self.balancer.url

    @property
    def kafka_settings(self) -> KafkaSettings:
        return self.kafka.settings

    @property
    def env(self) -> dict[str, str]:
        """KEEL_* as a deployment sets them: the secret would come from a file; here, the run's."""
        return {
            "KEEL_DATABASE_URL": self.formation.dsn,
            "KEEL_KAFKA_BOOTSTRAP": self.kafka.bootstrap,
            "KEEL_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "KEEL_KAFKA_SASL_MECHANISM": self.kafka.mechanism,
            "KEEL_KAFKA_SASL_USERNAME": self.kafka.username,
            "KEEL_KAFKA_SASL_PASSWORD": self.kafka.password,
            "KEEL_KAFKA_REPLICATION_FACTOR": "3",
            "KEEL_KAFKA_MIN_INSYNC_REPLICAS": "2",
            "KEEL_RELAY_SHARDS": str(REPLICAS),
            "KEEL_TOPIC_PREFIX": "",
        }

    def since(self) -> float:
        return round(time.monotonic() - self.epoch, 1)

    async def start(self) -> dict[str, float]:
        """Engines, schema and topics, services, balancer; seconds each step took."""
        took: dict[str, float] = {}
        started = time.monotonic()
        await asyncio.gather(asyncio.to_thread(self.kafka.start), self.formation.start())
        took["engines"] = round(time.monotonic() - started, 1)
        self.postgres_version = (
            f"{await asyncio.to_thread(self.formation.server_version)} x2"
            " (pg_auto_failover, synchronous standby)"
        )
        started = time.monotonic()
        await asyncio.gather(self._keel("migrate"), self._keel("topics", "apply"))
        self._start_services()
        await asyncio.to_thread(self.balancer.start)
        await asyncio.gather(self._create_key(), self._wait_ready())
        took["services"] = round(time.monotonic() - started, 1)
        return took

    async def _keel(self, *args: str) -> str:
        return await keel_ok(*args, env=self.env)

    def _start_services(self) -> None:
        commands: dict[str, tuple[str, ...]] = {}
        for index, port in enumerate(self.api_ports):
            commands[f"api-{index + 1}"] = ("api", "--port", str(port))
        for index in range(REPLICAS):
            for copy in range(REPLICAS):
                commands[f"relay-{index}-{copy + 1}"] = ("relay", "--shard", str(index))
            for role, args in _COMMANDS.items():
                commands[f"{role}-{index + 1}"] = args
        self.services.update(
            supervised(
                self.root, commands, self.env, self.restart_after_s, self.crashes, self.since
            )
        )

    async def _create_key(self) -> None:
        self.key = await create_api_key(self.env)

    async def _wait_ready(self) -> None:
        """Until both replicas answer /readyz through the balancer and the projectors are live."""
        deadline = time.monotonic() + _READY_S
        async with httpx.AsyncClient(timeout=5) as client:
            for port in self.api_ports:
                while True:
                    with contextlib.suppress(httpx.HTTPError):
                        if (await client.get(f"http://127.0.0.1:{port}/readyz")).is_success:
                            break
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"API :{port} did not get ready; see {self.root}/logs")
                    await asyncio.sleep(0.2)
        while set((await asyncio.to_thread(self.balancer.states)).values()) != {"UP"}:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"HAProxy does not see both replicas up: {self.balancer.states()}"
                )
            await asyncio.sleep(0.2)
        readiness = await wait_projector_live(
            self.kafka_settings, projector_group(""), [], max(1.0, deadline - time.monotonic())
        )
        if readiness is not Readiness.LIVE:
            raise RuntimeError(f"the projectors are not live: {readiness}")

    async def close(self) -> None:
        await asyncio.gather(*(service.close() for service in self.services.values()))
        with contextlib.suppress(Exception):
            self.balancer.stop()
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.kafka.stop)
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.formation.stop)
