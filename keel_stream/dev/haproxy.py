"""API replicas behind HAProxy: its configuration, and HAProxy run as a child process.

The configuration is the one docs/operations.md describes (Running API replicas behind a
balancer): round-robin over the replicas, each checked on `GET /readyz`; client and server
timeouts longer than the SSE heartbeat, so that an open stream is never cut by the balancer;
keep-alive (no `http-server-close`), so a stream is one long response; a request that could not
reach a replica (connection refused: it died) is retried on another, and nothing else is
retried, so a POST is never sent twice by the balancer. Every response names the replica that
served it in `X-Keel-Replica`.

`Haproxy` writes that configuration under a directory of its own, checks it (`haproxy -c`),
runs HAProxy in the foreground in its own session (SIGKILLed with the thread that started it),
and reads the replicas' states off its admin socket. tests/support/balancer.py runs `keel-stream
api` replicas behind it; a benchmark can do the same.
"""

from __future__ import annotations

import contextlib
import csv
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Self

from keel_stream.kafka.broker import free_port
from keel_stream.procs import die_with_parent

__all__ = [
    "HEADER",
    "IDLE_S",
    "Haproxy",
    "Replica",
    "find_haproxy",
    "haproxy_config",
    "haproxy_version",
]

HEADER: Final = "X-Keel-Replica"
"""The response header naming the replica that served the request."""
_BINARIES: Final = ("haproxy", "/usr/sbin/haproxy")
IDLE_S: Final = 60
"""`timeout client` and `timeout server`: the longest silence HAProxy lets an open response
have. An SSE stream is a plain HTTP response to HAProxy (not a tunnel: `timeout tunnel` does not
apply to it), so this must outlast the API's heartbeat (15 s) with room to spare."""
_STATUS_COLUMN: Final = "status"


@dataclass(frozen=True, slots=True)
class Replica:
    """One API process the balancer sends requests to."""

    name: str
    port: int
    host: str = "127.0.0.1"


def find_haproxy() -> str:
    """The haproxy executable; RuntimeError saying how to get one when there is none."""
    for name in _BINARIES:
        found = shutil.which(name)
        if found is not None:
            return found
    raise RuntimeError(
        "haproxy not found (looked for haproxy on PATH and /usr/sbin/haproxy): "
        "install it, e.g. `apt-get install haproxy` (Debian ships 2.6)"
    )


def haproxy_version(binary: str | None = None) -> str:
    """The version HAProxy reports (`2.6.12-1+deb12u4`)."""
    shown = subprocess.run(
        [binary or find_haproxy(), "-v"], capture_output=True, text=True, timeout=30, check=True
    )
    first = shown.stdout.splitlines()[0] if shown.stdout else ""
    return first.removeprefix("HAProxy version ").split(" ", 1)[0]


def haproxy_config(
    port: int, replicas: Sequence[Replica], admin_socket: Path, *, check_ms: int = 500
) -> str:
    """The configuration: one frontend on 127.0.0.1:`port`, one backend of `replicas`."""
    servers = "\n".join(f"    server {r.name} {r.host}:{r.port} check" for r in replicas)
    return f"""\
global
    log stdout format raw local0
    stats socket {admin_socket} mode 600 level admin
    maxconn 4096

defaults
    mode http
    log global
    option httplog
    option dontlognull
    timeout connect 2s
    timeout http-request 10s
    timeout client {IDLE_S}s
    timeout server {IDLE_S}s
    timeout client-fin 5s
    retries 3
    option redispatch 1
    retry-on conn-failure

frontend keel_api
    bind 127.0.0.1:{port}
    default_backend keel_api_replicas

backend keel_api_replicas
    balance roundrobin
    option httpchk
    http-check send meth GET uri /readyz
    http-check expect status 200
    default-server inter {check_ms} fall 2 rise 2
    http-response set-header {HEADER} %[srv_name]
{servers}
"""


class Haproxy:
    """HAProxy in front of `replicas`, on `port` (a free one by default), under `work_dir`."""

    def __init__(
        self, work_dir: Path, replicas: Sequence[Replica], port: int | None = None
    ) -> None:
        self.work_dir = work_dir
        self.replicas = tuple(replicas)
        self.port = port or free_port()
        self.config_path = work_dir / "haproxy.cfg"
        self.log_path = work_dir / "haproxy.log"
        # A Unix socket's path is short (108 bytes): not under a deep work directory.
        self.admin_socket = Path(tempfile.gettempdir()) / f"keel-haproxy-{self.port}.sock"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> Self:
        """Write and check the configuration, start HAProxy, wait until it accepts."""
        binary = find_haproxy()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(haproxy_config(self.port, self.replicas, self.admin_socket))
        checked = subprocess.run(
            [binary, "-c", "-f", str(self.config_path)],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        if checked.returncode != 0:
            raise RuntimeError(f"haproxy refused {self.config_path}:\n{checked.stderr}")
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [binary, "-db", "-f", str(self.config_path)],
                stdout=log, stderr=subprocess.STDOUT, cwd=self.work_dir,
                start_new_session=True, preexec_fn=die_with_parent(),
            )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while not (_accepts(self.port) and self.admin_socket.exists()):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"haproxy did not start: {self.log_path.read_text()[-2000:]}")
            time.sleep(0.05)
        return self

    def states(self) -> dict[str, str]:
        """Each replica's state as HAProxy sees it now (UP, DOWN, `UP 1/2`, ...)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as admin:
            admin.settimeout(5)
            admin.connect(str(self.admin_socket))
            admin.sendall(b"show stat\n")
            answer = b""
            while chunk := admin.recv(65536):
                answer += chunk
        rows = csv.DictReader(answer.decode().removeprefix("# ").splitlines())
        names = {r.name for r in self.replicas}
        return {row["svname"]: row[_STATUS_COLUMN] for row in rows if row["svname"] in names}

    def stop(self) -> None:
        """SIGTERM to HAProxy's group, then SIGKILL after 10 s; its files stay."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            _end(process)
        self.admin_socket.unlink(missing_ok=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _end(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _accepts(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
        return True
    return False
