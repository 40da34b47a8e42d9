"""`keel-stream dev` run as a user runs it, for the tests that start, signal and kill it: one data
directory, every dev started on it, what each recorded and logged."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from keel_stream.dev.postgres import stop_postmaster
from keel_stream.procs import Proc, wait_gone
from tests.support.cli import KEEL

API_KEY = "dev-runs-key"
READY_S = 120.0


def wait_for(check: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Poll check until it returns something truthy; fail naming what did not happen."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@dataclass
class DevRun:
    """One `keel-stream dev` process, in a session of its own (so its group can be signalled)."""

    proc: subprocess.Popen[bytes]
    out: Path
    err: Path

    def lines(self) -> list[str]:
        return self.out.read_text(errors="replace").splitlines()

    def ready(self) -> bool:
        if any(line.startswith("ready") for line in self.lines()):
            return True
        assert self.proc.poll() is None, f"dev exited: {self.out.read_text()}{self.err.read_text()}"
        return False

    def line(self, prefix: str) -> str:
        (found,) = [line for line in self.lines() if line.startswith(prefix)]
        return found.removeprefix(prefix).strip()

    @property
    def api_url(self) -> str:
        return self.line("api: ")

    def dev_log(self) -> list[dict[str, Any]]:
        """dev's own log entries (JSON lines, its stderr being a file), in order."""
        entries = []
        for text in self.err.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(text)
                if isinstance(entry, dict) and entry.get("component") == "dev":
                    entries.append(entry)
        return entries

    def logged(self, event: str, **fields: Any) -> list[dict[str, Any]]:
        """dev's entries with this event and these fields."""
        return [
            entry
            for entry in self.dev_log()
            if entry.get("event") == event and all(entry.get(k) == v for k, v in fields.items())
        ]

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.api_url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30
        )


@dataclass
class Devs:
    """The data directory under test and every dev started on it."""

    data_dir: Path
    logs: Path
    runs: list[DevRun] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("KEEL_DATABASE_URL", "KEEL_KAFKA_BOOTSTRAP", "KEEL_DEV_API_KEY")
        }
        env.update(KEEL_DATA_DIR=str(self.data_dir), KEEL_API_PORT="0", KEEL_DEV_API_KEY=API_KEY)
        return env

    def start(self) -> DevRun:
        n = len(self.runs)
        out, err = self.logs / f"dev{n}.out", self.logs / f"dev{n}.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            proc = subprocess.Popen(
                [*KEEL, "dev"], stdout=stdout, stderr=stderr, env=self.env, start_new_session=True
            )
        run = DevRun(proc, out, err)
        self.runs.append(run)
        wait_for(run.ready, READY_S, "dev to say ready")
        return run

    def running(self) -> DevRun:
        """The dev running now, started if none is."""
        if self.runs and self.runs[-1].proc.poll() is None:
            return self.runs[-1]
        return self.start()

    def recorded(self) -> dict[str, Proc]:
        """The processes the running dev recorded (dev.pids.json)."""
        entries = json.loads((self.data_dir / "dev.pids.json").read_text())
        return {name: Proc(e["pid"], e["start_ticks"]) for name, e in entries.items()}

    def addresses(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads((self.data_dir / "dev.json").read_text())
        return result

    def kill_everything(self) -> None:
        leftovers: list[Proc] = []
        with contextlib.suppress(OSError, ValueError, KeyError):
            leftovers += self.recorded().values()
        for run in self.runs:
            if run.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(run.proc.pid, signal.SIGKILL)
            run.proc.wait()
        pid_file = self.data_dir / "postgres" / "postmaster.pid"
        with contextlib.suppress(OSError, ValueError):
            postmaster = Proc.of(int(pid_file.read_text().split("\n", 1)[0]))
            if postmaster is not None:
                stop_postmaster(postmaster, fast_s=10)
        for proc in leftovers:
            proc.signal(signal.SIGKILL)
        wait_gone(leftovers, 10)
