"""A provider process in its own process group, and its reclaim: close stdin, grace period,
SIGTERM to the whole group, SIGKILL to the whole group.

The child is started with ``start_new_session=True``, so its pid is its process-group id and
every grandchild that does not call setsid itself stays in that group and is reclaimed with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping, Sequence

__all__ = ["ProviderProcess", "group_alive"]

_STREAM_LIMIT = 16 * 1024 * 1024
_POLL_S = 0.02


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still exists."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ProviderProcess:
    """One spawned provider; its environment is exactly ``env`` (nothing is inherited)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.pgid = proc.pid

    @classmethod
    async def spawn(
        cls, command: Sequence[str], env: Mapping[str, str], cwd: str | None = None
    ) -> ProviderProcess:
        proc = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
            limit=_STREAM_LIMIT,
        )
        return cls(proc)

    async def _wait_exit(self, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(self.proc.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def _wait_group_gone(self, timeout_s: float) -> bool:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while group_alive(self.pgid):
            if asyncio.get_running_loop().time() > deadline:
                return False
            await asyncio.sleep(_POLL_S)
        return True

    def _signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, signum)

    async def close_stdin(self) -> None:
        stdin = self.proc.stdin
        if stdin is None or stdin.is_closing():
            return
        stdin.close()
        with contextlib.suppress(ConnectionError, BrokenPipeError):
            await stdin.wait_closed()

    async def terminate(self, grace_s: float = 2.0, term_s: float = 2.0) -> None:
        """Close stdin, wait ``grace_s``, SIGTERM the group, wait ``term_s``, SIGKILL the group.

        SIGTERM goes to the group even when the leader left on its own: grandchildren may stay.
        """
        await self.close_stdin()
        await self._wait_exit(grace_s)
        self._signal_group(signal.SIGTERM)
        if not await self._wait_group_gone(term_s):
            self._signal_group(signal.SIGKILL)
        await self.proc.wait()
        await self._wait_group_gone(term_s)
