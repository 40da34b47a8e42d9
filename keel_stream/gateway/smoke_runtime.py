"""What the external-gateway smoke drives: the real runtime (`keel-stream api`) as a child
process, the CLI, and the processes the runtime spawned (found through /proc)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from keel_stream import procs
from keel_stream.kafka.broker import free_port
from keel_stream.procs import proc_stat
from keel_stream.settings import process_environ

__all__ = ["Runtime", "SmokeFailed", "group_members", "processes_with", "until"]

DEADLINE_S = 20.0


class SmokeFailed(AssertionError):
    """A step did not hold."""


def until(check: Callable[[], Any], what: str, deadline_s: float = DEADLINE_S) -> Any:
    """Poll ``check`` until it returns something truthy; SmokeFailed after the deadline."""
    deadline = time.monotonic() + deadline_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SmokeFailed(f"not within {deadline_s}s: {what}")
        time.sleep(0.05)


def processes_with(marker: str) -> list[int]:
    """Live processes whose command line contains ``marker`` (zombies excluded)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        stat = proc_stat(int(entry.name))
        if marker.encode() in cmdline and stat is not None and stat.live:
            found.append(stat.pid)
    return found


def group_members(pgids: set[int]) -> list[int]:
    """Live (non-zombie) processes in any of the process groups ``pgids``."""
    return [stat.pid for pgid in sorted(pgids) for stat in procs.group_members(pgid)]


def pgid_of(pid: int) -> int:
    stat = proc_stat(pid)
    if stat is None:
        raise SmokeFailed(f"process {pid} is gone")
    return stat.pgrp


@dataclass
class Runtime:
    """The runtime under test: `keel-stream api` with a boot document, and the CLI."""

    database_url: str
    boot_config: Path
    data_dir: Path
    extra_env: Mapping[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    key: str = ""

    @property
    def env(self) -> dict[str, str]:
        return {
            **process_environ(),
            "KEEL_DATABASE_URL": self.database_url,
            "KEEL_EXTERNAL_CONFIG": str(self.boot_config),
            "KEEL_DATA_DIR": str(self.data_dir),
            "KEEL_API_PORT": str(self.port),
            "KEEL_LOG_LEVEL": "warning",
            **self.extra_env,
        }

    def cli(self, *args: str) -> str:
        command = [sys.executable, "-m", "keel_stream", *args]
        done = subprocess.run(command, env=self.env, capture_output=True, timeout=120, check=False)
        if done.returncode != 0:
            raise SmokeFailed(f"keel-stream {' '.join(args)}: {done.stderr.decode()[-800:]}")
        return done.stdout.decode()

    def start(self) -> None:
        with (self.data_dir / "runtime.log").open("ab") as log:  # the child keeps its copy
            self.process = subprocess.Popen(
                [sys.executable, "-m", "keel_stream", "api"],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        until(self._ready, "the runtime answers /readyz")

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            tail = (self.data_dir / "runtime.log").read_text()[-2000:]
            raise SmokeFailed(f"the runtime exited ({self.process.returncode}): {tail}")
        try:
            return httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> int:
        """SIGTERM and wait; the exit status."""
        if self.process is None or self.process.poll() is not None:
            return 0 if self.process is None else int(self.process.returncode)
        self.process.send_signal(signal.SIGTERM)
        return int(self.process.wait(60))

    def call(self, method: str, path: str, body: Any = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.key}"}
        content = None if body is None else orjson.dumps(body)
        if content is not None:
            headers["Content-Type"] = "application/json"
        return httpx.request(
            method, f"{self.url}{path}", headers=headers, content=content, timeout=30
        )

    def events(self, session: str) -> list[dict[str, Any]]:
        response = self.call("GET", f"/v1/sessions/{session}/events?limit=1000")
        if response.status_code != 200:
            raise SmokeFailed(f"events: {response.status_code} {response.text}")
        events: list[dict[str, Any]] = response.json()["events"]
        return events

    def of_type(self, session: str, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events(session) if e["payload"].get("type") == kind]

    def external_status(self, session: str) -> str:
        status: str = self.call("GET", f"/v1/sessions/{session}").json()["external"]["status"]
        return status
