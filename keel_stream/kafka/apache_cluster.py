"""Apache Kafka 4 as a three-node KRaft cluster on the loopback, from the jars Maven resolved.

For the cluster tests and the chaos benchmark: each node is broker and controller (a 3-voter
quorum), has its own log dir and ports, and runs in its own process group. Clients connect on
a SASL_PLAINTEXT listener with SCRAM; the user is created by `kafka-storage format
--add-scram` before the first start (shared/design/production.md), so no client ever reaches a
broker without credentials. Brokers talk to each other and to the controllers in plain text
on listeners of their own. `kill(node)` SIGKILLs a node's process group, `restart(node)`
starts it again on the same data.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

from aiokafka.errors import KafkaError

from keel_stream.kafka import clients
from keel_stream.kafka.apache import (
    SERVER_MAIN,
    STORAGE_TOOL_MAIN,
    errors_in_log,
    jvm_options,
    new_cluster_id,
    render_properties,
    server_properties,
)
from keel_stream.kafka.apache_resolve import LOG4J_CONFIG, pinned_version, require_java, resolve
from keel_stream.kafka.broker import free_port
from keel_stream.kafka.settings import KafkaSettings, SaslMechanism

__all__ = ["ApacheKafkaCluster", "ClusterNode", "cluster_node_properties"]

NODES: Final = 3
_SCRAM_LOGIN: Final = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
_TOOL_OPTIONS: Final = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]


@dataclass(frozen=True, slots=True)
class ClusterNode:
    """One node's id and ports: clients, the other brokers, the controllers."""

    node_id: int
    client_port: int
    internal_port: int
    controller_port: int


def cluster_node_properties(
    data_dir: Path, node: ClusterNode, voters: str, mechanism: SaslMechanism
) -> dict[str, str]:
    """A broker+controller of a 3-voter quorum, SASL/SCRAM on the client listener, every
    internal topic replicated three times with two in sync."""
    properties = server_properties(data_dir, node.client_port, node.controller_port)
    listener = mechanism.lower()
    properties |= {
        "node.id": str(node.node_id),
        "controller.quorum.voters": voters,
        "listeners": (
            f"CLIENT://127.0.0.1:{node.client_port},"
            f"INTERNAL://127.0.0.1:{node.internal_port},"
            f"CONTROLLER://127.0.0.1:{node.controller_port}"
        ),
        "advertised.listeners": (
            f"CLIENT://127.0.0.1:{node.client_port},INTERNAL://127.0.0.1:{node.internal_port}"
        ),
        "inter.broker.listener.name": "INTERNAL",
        "listener.security.protocol.map": (
            "CLIENT:SASL_PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT"
        ),
        "listener.name.client.sasl.enabled.mechanisms": mechanism,
        f"listener.name.client.{listener}.sasl.jaas.config": _SCRAM_LOGIN,
        "default.replication.factor": str(NODES),
        "min.insync.replicas": "2",
        "offsets.topic.replication.factor": str(NODES),
        "transaction.state.log.replication.factor": str(NODES),
        "transaction.state.log.min.isr": "2",
        "share.coordinator.state.topic.replication.factor": str(NODES),
        "share.coordinator.state.topic.min.isr": "2",
        # a killed leader's partitions move within seconds, not the default 9 s + 18 s
        "broker.session.timeout.ms": "4000",
        "broker.heartbeat.interval.ms": "1000",
        "controller.quorum.election.timeout.ms": "1000",
        "controller.quorum.fetch.timeout.ms": "2000",
    }
    return properties


async def _brokers_listed(kafka: KafkaSettings) -> set[int]:
    admin = clients.admin(kafka, "probe", request_timeout_ms=3_000)
    try:
        await asyncio.wait_for(admin.start(), 5)
        cluster = await asyncio.wait_for(admin.describe_cluster(), 5)
        return {int(broker["node_id"]) for broker in cluster.get("brokers", [])}
    except (TimeoutError, KafkaError, OSError):
        return set()
    finally:
        await admin.close()


def _listed(kafka: KafkaSettings) -> set[int]:
    """The brokers a metadata request lists, i.e. registered and unfenced (own event loop)."""
    with ThreadPoolExecutor(1, thread_name_prefix="kafka-probe") as pool:
        return pool.submit(asyncio.run, _brokers_listed(kafka)).result()


def _exited(pid: int) -> bool:
    """Whether the child has exited, without reaping it (its group id stays reserved)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None
    except ChildProcessError:
        return True


class ApacheKafkaCluster:
    """Three Apache Kafka KRaft nodes on loopback ports, each a child process group."""

    def __init__(
        self,
        root: Path,
        *,
        username: str = "keel",
        password: str | None = None,
        mechanism: SaslMechanism = "SCRAM-SHA-512",
        version: str | None = None,
    ) -> None:
        if mechanism not in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            raise ValueError(f"the cluster authenticates with SCRAM, not {mechanism}")
        self.root = Path(root)
        self.version = version or pinned_version()
        self.username, self.mechanism = username, mechanism
        self.password = password or secrets.token_urlsafe(16)
        self.nodes = [
            ClusterNode(i, free_port(), free_port(), free_port()) for i in range(1, NODES + 1)
        ]
        self._processes: dict[int, subprocess.Popen[bytes]] = {}
        self._logs: dict[int, IO[bytes]] = {}
        self._java = ""
        self._classpath = ""

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.client_port}" for n in self.nodes)

    @property
    def settings(self) -> KafkaSettings:
        """How a client of the cluster connects: SASL_PLAINTEXT with the SCRAM user."""
        return self.settings_as(self.username, self.password)

    def settings_as(self, username: str, password: str) -> KafkaSettings:
        return KafkaSettings(
            self.bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism=self.mechanism,
            sasl_username=username,
            sasl_password=password,
        )

    def data_dir(self, node_id: int) -> Path:
        return self.root / f"node{node_id}"

    def log_path(self, node_id: int) -> Path:
        return self.data_dir(node_id) / "server.log"

    def pid(self, node_id: int) -> int:
        return self._processes[node_id].pid

    def running(self, node_id: int) -> bool:
        process = self._processes.get(node_id)
        return process is not None and not _exited(process.pid)

    def start(self, timeout_s: float = 120.0) -> str:
        """Resolve the jars, format every node (with the SCRAM user), start all three and wait
        until the cluster lists every broker; return the bootstrap list."""
        self._java, self._classpath = require_java(), f"{resolve(self.version)}/*"
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        cluster_id = new_cluster_id()
        try:
            for node in self.nodes:
                config = self._configure(node, voters)
                self._format(node.node_id, config, cluster_id)
            for node in self.nodes:
                self._spawn(node.node_id)
            self._wait_listed({n.node_id for n in self.nodes}, timeout_s)
        except BaseException:
            self.stop()
            raise
        return self.bootstrap

    def _configure(self, node: ClusterNode, voters: str) -> Path:
        data_dir = self.data_dir(node.node_id)
        data_dir.mkdir(parents=True, exist_ok=True)
        config = data_dir / "server.properties"
        properties = cluster_node_properties(data_dir, node, voters, self.mechanism)
        config.write_text(render_properties(properties))
        return config

    def _format(self, node_id: int, config: Path, cluster_id: str) -> None:
        scram = f"{self.mechanism}=[name={self.username},password={self.password}]"
        command = [
            self._java, *_TOOL_OPTIONS, f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
            "-cp", self._classpath, STORAGE_TOOL_MAIN, "format",
            "--cluster-id", cluster_id, "--config", str(config), "--add-scram", scram,
        ]  # fmt: skip
        with self.log_path(node_id).open("ab") as log:
            result = subprocess.run(
                command, stdout=log, stderr=subprocess.STDOUT, timeout=120, check=False
            )
        if result.returncode != 0:
            raise RuntimeError(
                f"formatting node {node_id} for Apache Kafka {self.version} failed "
                f"(exit {result.returncode}):\n{errors_in_log(self.log_path(node_id))}"
            )

    def _spawn(self, node_id: int) -> None:
        config = self.data_dir(node_id) / "server.properties"
        log = self._logs.get(node_id) or self.log_path(node_id).open("ab")
        self._logs[node_id] = log
        self._processes[node_id] = subprocess.Popen(
            [self._java, *jvm_options(), "-cp", self._classpath, SERVER_MAIN, str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.data_dir(node_id),
            start_new_session=True,
        )

    def _answers(self, node_id: int) -> bool:
        """The node answers on its own client port and lists itself (a restarted node is
        listed by the others until its session times out: only its own answer counts)."""
        node = self.nodes[node_id - 1]
        with socket.socket() as sock:  # not before it listens: the client logs each refusal
            sock.settimeout(0.5)
            if sock.connect_ex(("127.0.0.1", node.client_port)) != 0:
                return False
        return node_id in _listed(self.settings.at(f"127.0.0.1:{node.client_port}"))

    def _wait_listed(self, wanted: set[int], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not all(self._answers(i) for i in wanted):
            dead = [i for i in wanted if not self.running(i)]
            if dead or time.monotonic() > deadline:
                reason = f"node {dead} exited" if dead else "not all brokers listed in time"
                logs = "\n".join(
                    f"--- node {i} ---\n{errors_in_log(self.log_path(i)) or '(no errors)'}"
                    for i in sorted(wanted)
                )
                raise RuntimeError(f"Apache Kafka {self.version} cluster: {reason}\n{logs}")
            time.sleep(0.2)

    def kill(self, node_id: int) -> None:
        """SIGKILL the node's whole process group, as a machine crash would end it."""
        process = self._processes[node_id]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def restart(self, node_id: int, timeout_s: float = 60.0) -> None:
        """Start a stopped node again on its data; return once the cluster lists it."""
        if self.running(node_id):
            raise RuntimeError(f"node {node_id} is running")
        self._spawn(node_id)
        self._wait_listed({node_id}, timeout_s)

    def stop(self) -> None:
        """End every node's process group (SIGKILL: the data is temporary)."""
        for node_id in list(self._processes):
            self.kill(node_id)
        self._processes.clear()
        for log in self._logs.values():
            log.close()
        self._logs.clear()

    def __enter__(self) -> ApacheKafkaCluster:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
