"""A provider process in its own process group, and its reclaim: close stdin, grace period,
SIGTERM to the whole group, SIGKILL to the whole group.

The child is started with ``start_new_session=True``, so its pid is its process-group id and
every grandchild that does not call setsid itself stays in that group and is reclaimed with it.

Optionally (keyword arguments of ``spawn``): a ``budget`` applied as rlimits before the
provider runs (keel_stream.gateway.budget; one above the runtime's hard limits raises
BudgetRefused and nothing is spawned), a ``registry`` that keeps a pidfile of the group until it
is reclaimed (keel_stream.gateway.pidfiles), and an ``audit`` log of the spawn, the refusal and
the reclaim (keel_stream.gateway.audit).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from keel_stream.errors import BudgetRefused
from keel_stream.gateway.audit import AuditLog
from keel_stream.gateway.budget import check, limits_of, wrap_command
from keel_stream.gateway.jsonrpc import DEFAULT_MAX_LINE_BYTES
from keel_stream.gateway.pidfiles import PidRegistry
from keel_stream.procs import group_members
from keel_stream.tenancy.document import Budget, redact_env

__all__ = ["ProviderProcess", "Reclaim", "group_alive"]

_POLL_S = 0.02
Reclaim = Literal["exited", "sigterm", "sigkill"]


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still exists."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _budget_document(budget: Budget | None) -> dict[str, int] | None:
    if budget is None:
        return None
    return budget.model_dump(by_alias=True, exclude_none=True)


def _refuse(
    exc: BudgetRefused, name: str, command: Sequence[str], budget: Budget, audit: AuditLog | None
) -> None:
    if audit is not None:
        audit.record(
            "provider.budget_refused",
            name=name,
            command=list(command),
            budget=_budget_document(budget),
            refused=exc.data["refused"],
        )


def _executable(command: Sequence[str], env: Mapping[str, str], cwd: str | None) -> None:
    """The OSError the spawn would raise for a missing program (the budget wrapper defers it)."""
    program = command[0]
    if os.sep in program and cwd is not None:
        program = str(Path(cwd) / program)
    if shutil.which(program, path=env.get("PATH", os.defpath)) is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command[0])


class ProviderProcess:
    """One spawned provider; its environment is exactly ``env`` (nothing is inherited)."""

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        *,
        name: str = "provider",
        audit: AuditLog | None = None,
        registry: PidRegistry | None = None,
    ) -> None:
        self.proc = proc
        self.pgid = proc.pid
        self.name = name
        self.audit = audit
        self.registry = registry
        self.reclaimed: Reclaim | None = None

    @classmethod
    async def spawn(
        cls,
        command: Sequence[str],
        env: Mapping[str, str],
        cwd: str | None = None,
        *,
        name: str | None = None,
        kind: str | None = None,
        budget: Budget | None = None,
        declared_env: Mapping[str, str] | None = None,
        audit: AuditLog | None = None,
        registry: PidRegistry | None = None,
        line_limit: int = DEFAULT_MAX_LINE_BYTES,
        declared_command: Sequence[str] | None = None,
    ) -> ProviderProcess:
        """Start ``command``; BudgetRefused (audited) when ``budget`` cannot be granted.

        ``declared_env`` (the provider's env references) lets the audit copy of the
        environment show references; every other non-allow-listed value is redacted.
        ``line_limit``: the longest line its stdout and stderr readers return (asyncio raises
        ValueError for a longer one, and buffers at most twice this).
        ``declared_command`` (the command as declared, its references unresolved) is what the
        audit and the pidfile record, so a secret resolved into the arguments stays out."""
        name = name or Path(command[0]).name
        shown = list(declared_command or command)
        limits = limits_of(budget)
        if budget is not None:
            try:
                check(limits)
            except BudgetRefused as exc:
                _refuse(exc, name, shown, budget, audit)
                raise
        if limits:
            _executable(command, env, cwd)
        proc = await asyncio.create_subprocess_exec(
            *wrap_command(command, limits),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
            limit=line_limit,
        )
        if registry is not None:
            registry.register(proc.pid, name, shown)
        if audit is not None:
            audit.record(
                "provider.spawned",
                name=name,
                kind=kind,
                command=shown,
                pid=proc.pid,
                pgid=proc.pid,
                env=redact_env(env, declared_env or {}),
                budget=_budget_document(budget),
                rlimits={limit.field: limit.value for limit in limits},
            )
        return cls(proc, name=name, audit=audit, registry=registry)

    async def _wait_exit(self, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(self.proc.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def _wait_group_gone(self, timeout_s: float) -> bool:
        """Whether no live process is left in the group within ``timeout_s`` (a zombie whose
        parent has not reaped it yet is dead: it holds nothing)."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while group_members(self.pgid):
            if asyncio.get_running_loop().time() > deadline:
                return False
            await asyncio.sleep(_POLL_S)
        return True

    def _signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, signum)

    async def close_stdin(self, timeout_s: float) -> None:
        """Close stdin; a provider that reads none of what is still buffered for it gets
        ``timeout_s`` (the close completes when the pipe breaks at its death)."""
        stdin = self.proc.stdin
        if stdin is None or stdin.is_closing():
            return
        stdin.close()
        with contextlib.suppress(ConnectionError, BrokenPipeError, TimeoutError):
            await asyncio.wait_for(stdin.wait_closed(), timeout_s)

    async def terminate(
        self, grace_s: float = 2.0, term_s: float = 2.0, reason: str = "closed by the runtime"
    ) -> None:
        """Close stdin, wait ``grace_s``, SIGTERM the group, wait ``term_s``, SIGKILL the group;
        audited with ``reason`` (why the provider is reclaimed).

        SIGTERM goes to the group even when the leader left on its own: grandchildren may stay.
        Every wait is bounded: asyncio's ``wait`` also waits for the pipes to close, which a
        process that escaped the group could hold open.
        """
        await self.close_stdin(grace_s)
        how: Reclaim = "exited"
        if not (await self._wait_exit(grace_s) and not group_members(self.pgid)):
            how = "sigterm"
            self._signal_group(signal.SIGTERM)
            if not await self._wait_group_gone(term_s):
                how = "sigkill"
                self._signal_group(signal.SIGKILL)
        await self._wait_exit(term_s)
        await self._wait_group_gone(term_s)
        self._reclaimed(how, reason)

    def _reclaimed(self, how: Reclaim, reason: str) -> None:
        if self.reclaimed is not None:
            return
        self.reclaimed = how
        leftover = len(group_members(self.pgid))
        if self.registry is not None and not leftover:
            self.registry.remove(self.pgid)
        if self.audit is not None:
            self.audit.record(
                "provider.reclaimed",
                name=self.name,
                pid=self.proc.pid,
                pgid=self.pgid,
                how=how,
                leftover=leftover,
                returncode=self.proc.returncode,
                reason=reason,
            )
