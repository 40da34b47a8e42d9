"""Apache Kafka 4 as one KRaft node (broker and controller), from jars that Maven resolved.

For tests and `keel-stream dev`: the real broker, with durable data. `ApacheKafka(data_dir)`
writes a server.properties for a single node on two free loopback ports, formats the storage
the first time (never again: a restart on the same data_dir keeps every record), starts
`kafka.Kafka` in its own process group and waits until the broker answers a metadata request
listing itself (i.e. it is registered and unfenced). `stop()` ends the whole group.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

from aiokafka.errors import KafkaError

from keel_stream.kafka import clients
from keel_stream.kafka.apache_resolve import LOG4J_CONFIG, pinned_version, require_java, resolve
from keel_stream.kafka.broker import free_port
from keel_stream.kafka.settings import KafkaSettings

__all__ = [
    "ApacheKafka",
    "errors_in_log",
    "jvm_options",
    "new_cluster_id",
    "render_properties",
    "server_properties",
]

SERVER_MAIN = "kafka.Kafka"
STORAGE_TOOL_MAIN = "kafka.tools.StorageTool"
_PORT_TAKEN = ("Address already in use", "BindException")
_JVM_ERRORS = ("Error: ", "Error occurred during initialization", "Exception in thread")


def new_cluster_id() -> str:
    """A random cluster id as Kafka writes them (22 characters of URL-safe base64)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):  # would read as an option on the command line
            return text


def server_properties(data_dir: Path, port: int, controller_port: int) -> dict[str, str]:
    """One node that is broker and controller, on the loopback, sized for a small machine."""
    return {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data_dir / "data"),
        # as compose/ runs it: one replica of everything, topics only created explicitly
        "auto.create.topics.enable": "false",
        "num.partitions": "1",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        # fast on a 2-core machine: no join delay, fewer internal partitions and threads
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.num.partitions": "10",
        "transaction.state.log.num.partitions": "10",
        "num.network.threads": "2",
        "num.io.threads": "4",
        "background.threads": "4",
        "num.recovery.threads.per.data.dir": "1",
        "log.cleaner.threads": "1",
        "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
    }


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def render_properties(properties: Mapping[str, str]) -> str:
    """A Java .properties text, one key=value a line."""
    return "".join(f"{_escape(key)}={_escape(value)}\n" for key, value in properties.items())


def jvm_options(log4j_config: Path = LOG4J_CONFIG) -> list[str]:
    """A small heap, G1 as Kafka's scripts use it, the log to stdout through log4j2."""
    return [
        "-Xms256m",
        "-Xmx512m",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={log4j_config}",
    ]


_TOOL_OPTIONS = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]


def _accepts(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


async def _lists_itself(bootstrap: str) -> bool:
    # The node this process started: plain text on the loopback.
    admin = clients.admin(KafkaSettings(bootstrap), "probe", request_timeout_ms=3_000)
    try:
        await asyncio.wait_for(admin.start(), 5)
        cluster = await asyncio.wait_for(admin.describe_cluster(), 5)
        return bool(cluster.get("brokers"))
    except (TimeoutError, KafkaError, OSError):
        return False
    finally:
        await admin.close()


def _broker_answers(bootstrap: str) -> bool:
    """A metadata request lists a broker: it is registered and unfenced (own event loop)."""
    with ThreadPoolExecutor(1, thread_name_prefix="kafka-probe") as pool:
        return pool.submit(asyncio.run, _lists_itself(bootstrap)).result()


def _exited(pid: int) -> bool:
    """Whether the child has exited, without reaping it (its group id stays reserved)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None
    except ChildProcessError:
        return True


def _tail(path: Path, lines: int = 60, start: int = 0) -> str:
    """The last lines of a log, from byte `start` on (this run's part of the file)."""
    if not path.exists():
        return "(no log)"
    with path.open("rb") as handle:
        handle.seek(max(start, path.stat().st_size - 64 * 1024))
        text = handle.read().decode(errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def _is_error(line: str) -> bool:
    """A log4j ERROR/FATAL entry, or what the JVM itself prints when it cannot run."""
    return " ERROR " in line or " FATAL " in line or line.startswith(_JVM_ERRORS)


def errors_in_log(path: Path, start: int = 0, most: int = 8) -> str:
    """The first ERROR and FATAL entries logged from byte `start` on, each with the exception
    lines that follow it (not the stack frames): the cause, usually."""
    if not path.exists():
        return ""
    with path.open("rb") as handle:
        handle.seek(start)
        lines = handle.read().decode(errors="replace").splitlines()
    found: list[str] = []
    for index, line in enumerate(lines):
        if _is_error(line) and len(found) < most:
            following = [
                text for text in lines[index + 1 : index + 4] if not text.startswith(("[", "\t"))
            ]
            found.append("\n".join([line, *following[:2]]))
    return "\n".join(found)


class _PortTakenError(RuntimeError):
    pass


class ApacheKafka:
    """A single-node Apache Kafka (KRaft) on loopback ports, as a child process group."""

    def __init__(
        self,
        data_dir: Path,
        version: str | None = None,
        log_path: Path | None = None,
        *,
        port: int | None = None,
        controller_port: int | None = None,
        cache: Path | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.version = version or pinned_version()
        self.log_path = log_path or self.data_dir / "server.log"
        self._ports_fixed = port is not None or controller_port is not None
        self.port = port or free_port()
        self.controller_port = controller_port or free_port()
        self._cache = cache
        self._log: IO[bytes] | None = None
        self._log_start = 0
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and not _exited(self._process.pid)

    @property
    def pid(self) -> int | None:
        """The server's process id, which is also its process group id."""
        return self._process.pid if self._process is not None else None

    @property
    def formatted(self) -> bool:
        return (self.data_dir / "data" / "meta.properties").is_file()

    def log_tail(self, lines: int = 60) -> str:
        """The last lines the server (or the formatter) wrote since the last start."""
        return _tail(self.log_path, lines, self._log_start)

    def start(self, timeout_s: float = 120.0) -> str:
        """Resolve the jars, format if new, start, wait until it answers; return the bootstrap.

        Raises ResolveError when Java or Maven is missing, RuntimeError (with the tail of the
        server's log) when the server does not start in time.
        """
        if self.running:
            return self.bootstrap
        lib = resolve(self.version, self._cache)
        java = require_java()
        for _ in range(3):
            try:
                self._start_once(java, lib, timeout_s)
            except _PortTakenError:
                if self._ports_fixed:
                    raise
                self.port, self.controller_port = free_port(), free_port()
            else:
                return self.bootstrap
        raise RuntimeError(f"Apache Kafka {self.version}: no free ports after 3 tries")

    def _start_once(self, java: str, lib: Path, timeout_s: float) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "server.properties"
        properties = server_properties(self.data_dir, self.port, self.controller_port)
        config.write_text(render_properties(properties))
        self._log = self.log_path.open("ab")
        self._log_start = self._log.tell()
        classpath = f"{lib}/*"
        if not self.formatted:
            self._format(java, classpath, config)
        try:
            self._process = subprocess.Popen(
                [java, *jvm_options(), "-cp", classpath, SERVER_MAIN, str(config)],
                stdout=self._log,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                start_new_session=True,
            )
            self._wait_ready(self._process.pid, time.monotonic() + timeout_s)
        except (RuntimeError, OSError) as exc:
            self.stop()
            errors = errors_in_log(self.log_path, self._log_start)
            message = (
                f"Apache Kafka {self.version} did not start on {self.bootstrap}: {exc}\n"
                f"--- errors logged ---\n{errors or '(none)'}\n"
                f"--- last lines of {self.log_path} ---\n{self.log_tail()}"
            )
            if any(word in errors for word in _PORT_TAKEN):
                raise _PortTakenError(message) from exc
            raise RuntimeError(message) from exc

    def _format(self, java: str, classpath: str, config: Path) -> None:
        command = [
            java, *_TOOL_OPTIONS, f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
            "-cp", classpath, STORAGE_TOOL_MAIN,
            "format", "--cluster-id", new_cluster_id(), "--config", str(config),
        ]  # fmt: skip
        result = subprocess.run(
            command, stdout=self._log, stderr=subprocess.STDOUT, timeout=120, check=False
        )
        if result.returncode != 0:
            self.stop()
            raise RuntimeError(
                f"formatting {self.data_dir} for Apache Kafka {self.version} failed "
                f"(exit {result.returncode})\n--- last lines of {self.log_path} ---\n"
                f"{self.log_tail()}"
            )

    def _wait_ready(self, pid: int, deadline: float) -> None:
        while True:
            if _exited(pid):
                raise RuntimeError("the server exited")
            if _accepts(self.port) and _broker_answers(self.bootstrap):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"no answer on {self.bootstrap} before the deadline")
            time.sleep(0.2)

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM to the whole group, a grace period, then SIGKILL; the data stays."""
        process, self._process = self._process, None
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            while not _exited(process.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            with contextlib.suppress(ProcessLookupError):  # the leader is unreaped: safe
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> ApacheKafka:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
