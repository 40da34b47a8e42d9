"""Per-provider resource budgets: a stdio provider's ``budget`` becomes rlimits of its process.

The limits are set in the child, before the provider's own program runs, by a tiny wrapper:
``python -I -S -c <set the rlimits, then execvp>``.  The wrapper runs in the child's own new
session, so the provider keeps its pid (and process group) across the exec.  A wrapper rather
than ``preexec_fn``: code run between fork and exec may deadlock when the runtime has threads.

| budget field     | rlimit        | set to (soft = hard)                                   |
|------------------|---------------|--------------------------------------------------------|
| cpuSeconds       | RLIMIT_CPU    | seconds of CPU time (SIGXCPU, then SIGKILL)            |
| addressSpaceMb   | RLIMIT_AS     | MiB of virtual memory (allocations beyond fail)        |
| openFiles        | RLIMIT_NOFILE | open descriptors (a larger fd number cannot be opened) |
| processes        | RLIMIT_NPROC  | processes of the user (see below)                      |

Limits are inherited: the provider's grandchildren get them too (per process, not per group).
RLIMIT_NPROC counts every process of the real user id, the runtime's own included, so it bounds
forks only while the user as a whole is under it; the kernel does not enforce it for root.

Over budget refuses activation: a value above the runtime's own hard limit of that resource
could not be granted, so ``check`` raises BudgetRefused before anything is spawned.

cgroup v2 (a memory, cpu and pids budget for the whole group) is used by nothing yet;
``cgroup_v2_status`` says whether this host would allow it: a unified hierarchy that is
writable and delegates the controllers to us.
"""

from __future__ import annotations

import os
import resource
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from keel_stream.errors import BudgetRefused
from keel_stream.tenancy.document import Budget

__all__ = ["Limit", "cgroup_v2_status", "check", "limits_of", "wrap_command"]

_MIB: Final = 1024 * 1024
_FIELDS: Final = (
    ("cpuSeconds", "cpu_seconds", resource.RLIMIT_CPU, 1),
    ("addressSpaceMb", "address_space_mb", resource.RLIMIT_AS, _MIB),
    ("openFiles", "open_files", resource.RLIMIT_NOFILE, 1),
    ("processes", "processes", resource.RLIMIT_NPROC, 1),
)
_WRAPPER: Final = """\
import os, resource, sys
for spec in sys.argv[1].split(","):
    which, value = (int(part) for part in spec.split("="))
    resource.setrlimit(which, (value, value))
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as exc:
    print(f"cannot start {sys.argv[2]!r}: {exc}", file=sys.stderr, flush=True)
    os._exit(127)
"""


@dataclass(frozen=True, slots=True)
class Limit:
    """One rlimit a budget asks for."""

    field: str
    """The budget field, as in the document (camelCase)."""
    resource: int
    value: int
    """In the rlimit's own unit (bytes for RLIMIT_AS)."""


def limits_of(budget: Budget | None) -> list[Limit]:
    """The rlimits a budget asks for (none for no budget)."""
    if budget is None:
        return []
    limits = []
    for field, attribute, which, unit in _FIELDS:
        value = getattr(budget, attribute)
        if value is not None:
            limits.append(Limit(field, which, value * unit))
    return limits


def check(limits: Sequence[Limit]) -> None:
    """BudgetRefused when a limit exceeds the runtime's own hard limit of its resource."""
    refused: list[dict[str, Any]] = []
    for limit in limits:
        hard = resource.getrlimit(limit.resource)[1]
        if hard != resource.RLIM_INFINITY and limit.value > hard:
            refused.append({"limit": limit.field, "requested": limit.value, "hardLimit": hard})
    if refused:
        described = ", ".join(
            f"{r['limit']} asks for {r['requested']} above the hard limit {r['hardLimit']}"
            for r in refused
        )
        raise BudgetRefused(
            f"budget refused, the provider was not started: {described}",
            data={"refused": refused},
        )


def wrap_command(command: Sequence[str], limits: Sequence[Limit]) -> list[str]:
    """The command that sets ``limits`` in the child, then execs ``command``."""
    if not limits:
        return list(command)
    specs = ",".join(f"{limit.resource}={limit.value}" for limit in limits)
    return [sys.executable, "-I", "-S", "-c", _WRAPPER, specs, *command]


def cgroup_v2_status(
    root: Path = Path("/sys/fs/cgroup"), membership: Path = Path("/proc/self/cgroup")
) -> str | None:
    """None when this process could put a provider in a cgroup v2 of its own with memory,
    cpu and pids controllers; else why not (it is then rlimits only)."""
    try:
        lines = membership.read_text().splitlines()
    except OSError as exc:
        return f"cannot read {membership}: {exc.strerror}"
    unified = [line.split(":", 2)[2] for line in lines if line.startswith("0::")]
    if not unified:
        return "no cgroup v2 (unified) hierarchy"
    if len(lines) > 1:
        return "hybrid hierarchy: the controllers are on cgroup v1"
    own = root / unified[0].lstrip("/")
    try:
        controllers = set((own / "cgroup.controllers").read_text().split())
    except OSError as exc:
        return f"cannot read {own / 'cgroup.controllers'}: {exc.strerror}"
    missing = {"memory", "cpu", "pids"} - controllers
    if missing:
        return f"controllers not delegated here: {sorted(missing)}"
    if not (own / "cgroup.subtree_control").is_file() or not _writable(own):
        return f"{own} is not writable by this user"
    return None


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK) and os.access(path / "cgroup.procs", os.W_OK)
