"""A pidfile per spawned provider group, and the sweep that reclaims what a dead runtime left.

A runtime that is SIGKILLed never runs the stdio transport's reclaim, so its providers (and
their grandchildren) may live on.  Each spawn therefore writes ``<dir>/<pgid>.json``: the
provider's pid and process group, its start time, the runtime's own pid and start time, the
provider's name and command.  A clean reclaim removes the file.  ``sweep`` runs at the next
start and, for each file left:

- the runtime that wrote it is alive (same pid, same start time): the file is left alone;
- the group leader lives with the recorded start time: the group is ours; every live member
  (and the leader, even if it left the group) gets SIGTERM, a grace period, then SIGKILL;
- a process with the leader's pid lives with another start time: the number was reused by an
  unrelated process, nothing is killed;
- the leader is gone: the live members of the group that started no earlier than the leader
  are killed (a grandchild left behind is reclaimed), others are not.

Processes are named by pid and start time (keel_stream.procs), checked again right before
a signal.  Linux never hands out a pid that is still some group's id, so a group with live
members keeps its number.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Final

import orjson

from keel_stream.gateway.audit import AuditLog
from keel_stream.procs import Proc, group_members, proc_stat, wait_gone

__all__ = [
    "PIDS_DIR",
    "PidRecord",
    "PidRegistry",
    "SweepReport",
    "sweep",
    "sweep_data_dir",
]

PIDS_DIR: Final = Path("gateway") / "pids"
"""Where the pidfiles live, relative to the data directory (KEEL_DATA_DIR)."""


@dataclass(frozen=True, slots=True)
class PidRecord:
    pid: int
    pgid: int
    start_ticks: int
    runtime_pid: int
    runtime_start_ticks: int
    provider: str
    command: list[str]

    def runtime_alive(self) -> bool:
        return Proc(self.runtime_pid, self.runtime_start_ticks).alive()


class PidRegistry:
    """The pidfiles of the providers this runtime spawned."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self._own_start = Proc.me().start_ticks

    @classmethod
    def in_data_dir(cls, data_dir: Path | str) -> PidRegistry:
        return cls(Path(data_dir) / PIDS_DIR)

    def path(self, pgid: int) -> Path:
        return self.directory / f"{pgid}.json"

    def register(self, pid: int, provider: str, command: Sequence[str]) -> PidRecord:
        """Write the pidfile of a provider just spawned as a group leader (pgid = pid)."""
        stat = proc_stat(pid)
        record = PidRecord(
            pid=pid,
            pgid=pid,
            start_ticks=0 if stat is None else stat.start_ticks,
            runtime_pid=os.getpid(),
            runtime_start_ticks=self._own_start,
            provider=provider,
            command=list(command),
        )
        self.directory.mkdir(parents=True, exist_ok=True)
        target = self.path(record.pgid)
        temporary = target.with_suffix(".tmp")
        temporary.write_bytes(orjson.dumps(asdict(record)))
        temporary.replace(target)
        return record

    def remove(self, pgid: int) -> None:
        self.path(pgid).unlink(missing_ok=True)


def read_record(path: Path) -> PidRecord | None:
    """The record of a pidfile; None when it is not one."""
    try:
        return PidRecord(**orjson.loads(path.read_bytes()))
    except (OSError, orjson.JSONDecodeError, TypeError):
        return None


@dataclass
class SweepReport:
    groups_killed: int = 0
    processes_killed: int = 0
    live_runtime_skipped: int = 0
    """Pidfiles left alone: the runtime that wrote them is alive."""
    stale: int = 0
    """Pidfiles removed with nothing to kill: the group is gone or the pid was reused."""
    unreadable: int = 0
    killed: list[int] = field(default_factory=list)
    """The pids signalled."""


def _targets(record: PidRecord) -> list[Proc]:
    leader = proc_stat(record.pgid)
    if leader is not None and leader.start_ticks != record.start_ticks:
        return []  # the leader's pid now names an unrelated process
    members = [stat.proc for stat in group_members(record.pgid, record.start_ticks)]
    if leader is not None and leader.live and all(m.pid != leader.pid for m in members):
        members.append(leader.proc)  # the leader left its group (setpgid): still ours
    return members


def _kill(targets: Sequence[Proc], grace_s: float) -> tuple[str, int]:
    """SIGTERM, grace, SIGKILL; how it ended and how many processes are left."""
    for proc in targets:
        proc.signal(signal.SIGTERM)
    left = wait_gone(targets, grace_s)
    if not left:
        return "sigterm", 0
    for proc in left:
        proc.signal(signal.SIGKILL)
    return "sigkill", len(wait_gone(left, grace_s))


def sweep(
    directory: Path | str, audit: AuditLog | None = None, grace_s: float = 1.0
) -> SweepReport:
    """Reclaim the provider groups of dead runtimes named by the pidfiles in ``directory``."""
    report = SweepReport()
    root = Path(directory)
    paths = sorted(root.glob("*.json")) if root.is_dir() else []
    for path in paths:
        record = read_record(path)
        if record is None:
            report.unreadable += 1
            path.unlink(missing_ok=True)
            continue
        if record.runtime_alive():
            report.live_runtime_skipped += 1
            continue
        targets = _targets(record)
        if targets:
            how, leftover = _kill(targets, grace_s)
            report.groups_killed += 1
            report.processes_killed += len(targets)
            report.killed.extend(proc.pid for proc in targets)
            if audit is not None:
                audit.record(
                    "sweep.killed",
                    name=record.provider,
                    command=record.command,
                    pid=record.pid,
                    pgid=record.pgid,
                    processes=[proc.pid for proc in targets],
                    how=how,
                    leftover=leftover,
                )
            if leftover:
                continue  # unkillable for now (say, in uninterruptible sleep): try next time
        else:
            report.stale += 1
        path.unlink(missing_ok=True)
    return report


def sweep_data_dir(data_dir: Path | str, grace_s: float = 1.0) -> SweepReport:
    """The start-up sweep of a runtime's data directory (KEEL_DATA_DIR): its pidfiles, audited
    in its audit log.  Blocking (up to twice ``grace_s`` per group): call it before the event
    loop starts, or through ``asyncio.to_thread``."""
    return sweep(Path(data_dir) / PIDS_DIR, AuditLog.in_data_dir(data_dir), grace_s)
