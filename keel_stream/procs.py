"""Processes by identity: a pid together with its start time, so a reused pid is never touched.

The one process-identity module: the dev supervisor's children and lock files, and the gateway's
provider pidfiles and sweep (keel_stream.gateway.pidfiles), all name processes this way.
The start time is field 22 of /proc/<pid>/stat (clock ticks since boot): a pid names the same
process only while that field is unchanged. A zombie counts as gone. `die_with_parent` makes a
child receive SIGKILL when the thread that started it exits (Linux: PR_SET_PDEATHSIG), so a
supervisor that is SIGKILLed takes such children with it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Self

__all__ = [
    "Proc",
    "ProcStat",
    "child_exit",
    "describe_exit",
    "die_with_parent",
    "group_members",
    "proc_stat",
    "terminate",
    "wait_gone",
    "wait_reaped",
]

_POLL_S: Final = 0.02
_PR_SET_PDEATHSIG: Final = 1


@dataclass(frozen=True, slots=True)
class ProcStat:
    """What /proc says of a process: its state, process group and start time."""

    pid: int
    state: str
    pgrp: int
    start_ticks: int

    @property
    def live(self) -> bool:
        """Running (not a zombie)."""
        return self.state not in ("Z", "X")

    @property
    def proc(self) -> Proc:
        return Proc(self.pid, self.start_ticks)


def proc_stat(pid: int) -> ProcStat | None:
    """The process's state, process group and start time; None when it does not exist."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = text.rsplit(")", 1)[1].split()  # the name in parentheses may hold spaces
    return ProcStat(pid, fields[0], int(fields[2]), int(fields[19]))


def _all_processes() -> Iterable[ProcStat]:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = proc_stat(int(entry.name))
                if stat is not None:
                    yield stat


def group_members(pgid: int, started_since: int = 0) -> list[ProcStat]:
    """The live processes of a group that started at or after ``started_since`` ticks."""
    return [
        stat
        for stat in _all_processes()
        if stat.pgrp == pgid and stat.live and stat.start_ticks >= started_since
    ]


@dataclass(frozen=True, slots=True)
class Proc:
    """A process: its pid and its start time (clock ticks since boot)."""

    pid: int
    start_ticks: int

    @classmethod
    def of(cls, pid: int) -> Self | None:
        """The live process with this pid now; None when there is none."""
        stat = proc_stat(pid)
        if stat is None or not stat.live:
            return None
        return cls(pid, stat.start_ticks)

    @classmethod
    def me(cls) -> Self:
        own = cls.of(os.getpid())
        return own if own is not None else cls(os.getpid(), 0)

    def alive(self) -> bool:
        """The same process still runs (same pid, same start time, not a zombie)."""
        return Proc.of(self.pid) == self

    def exists(self) -> bool:
        """The same process is still in the process table, running or a zombie not yet reaped
        (its pid still answers kill(pid, 0), which is how PostgreSQL judges a lock file)."""
        stat = proc_stat(self.pid)
        return stat is not None and stat.start_ticks == self.start_ticks

    def signal(self, signum: int) -> None:
        """Send signum if this very process still runs (the start time is checked first)."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid, signum)

    def to_json(self) -> dict[str, int]:
        return {"pid": self.pid, "start_ticks": self.start_ticks}

    @classmethod
    def from_json(cls, value: object) -> Self | None:
        if not isinstance(value, dict):
            return None
        pid, ticks = value.get("pid"), value.get("start_ticks")
        if not isinstance(pid, int) or not isinstance(ticks, int):
            return None
        return cls(pid, ticks)


def wait_gone(procs: Iterable[Proc], timeout_s: float) -> list[Proc]:
    """Wait until none of procs runs (or the deadline); return those still running."""
    left = list(procs)
    deadline = time.monotonic() + timeout_s
    while (left := [p for p in left if p.alive()]) and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    return left


def wait_reaped(procs: Iterable[Proc], timeout_s: float) -> list[Proc]:
    """Wait until none of procs is even a zombie (or the deadline); return those left."""
    left = list(procs)
    deadline = time.monotonic() + timeout_s
    while (left := [p for p in left if p.exists()]) and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    return left


def terminate(procs: Iterable[Proc], grace_s: float = 5.0) -> list[Proc]:
    """SIGTERM, up to grace_s for them to exit, then SIGKILL; return those still running."""
    targets = [p for p in procs if p.alive()]
    for proc in targets:
        proc.signal(signal.SIGTERM)
    left = wait_gone(targets, grace_s)
    for proc in left:
        proc.signal(signal.SIGKILL)
    return wait_gone(left, grace_s)


def describe_exit(returncode: int | None) -> str:
    """How a process ended, in words: `exit status 1`, `signal SIGKILL` (a negative returncode
    is the signal that ended it, as subprocess reports it)."""
    if returncode is None:
        return "ended (how is not known)"
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"


def child_exit(pid: int) -> str | None:
    """None while this process's child `pid` runs; how it ended once it has, in words. The
    child is not reaped (its owner still waits for it)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return describe_exit(None)  # reaped already: it ended
    if info is None:
        return None
    killed = info.si_code in (os.CLD_KILLED, os.CLD_DUMPED)
    return describe_exit(-info.si_status if killed else info.si_status)


def die_with_parent() -> Callable[[], None] | None:
    """A child-setup function (subprocess preexec_fn) that has the child SIGKILLed when the
    calling thread exits; None where the platform has no parent-death signal.

    The parent's pid is taken now; a child whose parent died before the signal was armed
    kills itself at once."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not in the forked child
    parent = os.getpid()

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return arm
