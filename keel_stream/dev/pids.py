"""What a `keel-stream dev` started, in <data_dir>/dev.pids.json, and the sweep of what a dead
one left running.

The broker and the services (projections worker, relay, agent worker, API) die with dev (a
parent-death signal); the embedded PostgreSQL daemonizes and cannot. dev records itself, and each
of them with its start time as it starts (again at every restart), and the next dev, once it
holds the data directory's lock (so the previous one is surely dead), stops whatever of them still
runs: the same pid with the same start time, never a reused pid.
PostgreSQL gets a fast shutdown, the others SIGTERM then SIGKILL. A clean stop removes the file.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, Final

from keel_stream.dev.postgres import stop_postmaster
from keel_stream.procs import Proc, terminate

__all__ = ["PIDS_FILE", "DevPids", "Swept", "sweep_leftovers"]

PIDS_FILE: Final = "dev.pids.json"
_DEV: Final = "dev"
POSTGRES: Final = "postgres"
_ORDER: Final = ("api", "worker", "hooks", "triggers", "relay", "projector", "broker", POSTGRES)
"""Clients before the servers they use."""


def _write(path: Path, entries: dict[str, Any]) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(entries, indent=1))
    temporary.replace(path)


def _read(path: Path) -> dict[str, Any]:
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return entries if isinstance(entries, dict) else {}


class DevPids:
    """The record of this dev's processes, written as each one starts."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / PIDS_FILE
        self._entries: dict[str, Any] = {_DEV: Proc.me().to_json()}

    def record(self, name: str, pid: int | None) -> None:
        """Record a process dev just started (by pid; its start time is read now)."""
        proc = None if pid is None else Proc.of(pid)
        if proc is not None:
            self._entries[name] = proc.to_json()
            _write(self.path, self._entries)

    def clear(self) -> None:
        """Everything recorded was stopped: forget it."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


class Swept:
    """What the sweep found of a previous run: stopped, and (rarely) not stoppable."""

    def __init__(self) -> None:
        self.stopped: list[str] = []
        self.left: list[str] = []


def sweep_leftovers(data_dir: Path) -> Swept:
    """Stop what a previous dev on this data directory left running (call with its lock held).

    A record left behind is kept when something in it could not be stopped, so the next start
    tries again."""
    path = data_dir / PIDS_FILE
    entries = _read(path)
    swept = Swept()
    for name in _ORDER:
        proc = Proc.from_json(entries.get(name))
        if proc is None or not proc.alive() or proc.pid == os.getpid():
            continue
        left = not stop_postmaster(proc) if name == POSTGRES else bool(terminate([proc]))
        label = f"{name} (pid {proc.pid})"
        (swept.left if left else swept.stopped).append(label)
    if not swept.left:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return swept
