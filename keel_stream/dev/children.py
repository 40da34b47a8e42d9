"""The services `keel-stream dev` runs, each as a child process that is restarted when it dies.

Each child is `python -m keel_stream <command>` with the environment dev resolved, its stdout on
dev's stderr (dev's stdout is dev's own report), and armed with a parent-death signal
(keel_stream.procs.die_with_parent): if dev is SIGKILLed, and so never reaches its teardown,
the kernel SIGKILLs the child too. Every child is started from the event loop's thread, which
lives as long as dev: the parent-death signal fires when the thread that started the child ends.

A child that exits while dev does not stop it is restarted after a delay that doubles (with
jitter) from RESTART_INITIAL_S up to RESTART_MAX_S, and falls back to the initial delay once a
child has stayed up for STABLE_S: one `error` line per exit (service, pid, how it ended, the
delay) and one `info` line per restart, so a crash loop is visible and never hot. An exit that
comes with a stop (Ctrl-C reaches the children and dev together) is not reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Final

import structlog

from keel_stream.procs import describe_exit, die_with_parent
from keel_stream.retry import Backoff

__all__ = [
    "RESTART_INITIAL_S",
    "RESTART_MAX_S",
    "STABLE_S",
    "Restarts",
    "Service",
    "spawn",
    "terminate",
]

RESTART_INITIAL_S: Final = 0.5
RESTART_MAX_S: Final = 15.0
STABLE_S: Final = 30.0
"""A child up this long has recovered: its next restart waits the initial delay again."""
STOP_GRACE_S: Final = 20.0
"""How long a child has to exit after SIGTERM before it is SIGKILLed."""
_SETTLE_S: Final = 0.3
"""How long an exit waits for a stop that comes with it before it counts as a crash."""
_STDERR: Final = 2


class Restarts:
    """The delays before restarts: exponential with jitter, reset once a start has lasted."""

    def __init__(
        self,
        initial_s: float = RESTART_INITIAL_S,
        maximum_s: float = RESTART_MAX_S,
        stable_s: float = STABLE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._backoff = Backoff(initial_s, maximum_s)
        self._stable_s = stable_s
        self._clock = clock
        self._started_at = clock()
        self.count = 0
        """Restarts so far."""

    def started(self) -> None:
        self._started_at = self._clock()

    def delay(self) -> float:
        """The delay before the next start, the previous one having just ended."""
        if self._clock() - self._started_at >= self._stable_s:
            self._backoff.reset()
        self.count += 1
        return self._backoff.next_delay()


async def spawn(args: Sequence[str], env: Mapping[str, str]) -> asyncio.subprocess.Process:
    """Start `keel-stream ARGS` as a child armed to die with this thread; env is its whole
    environment."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "keel_stream",
        *args,
        env=dict(env),
        stdout=_STDERR,
        preexec_fn=die_with_parent(),
    )


async def _stopped_within(stopping: asyncio.Event, seconds: float) -> bool:
    """Wait up to seconds; True when stopping was set meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), seconds)
    return stopping.is_set()


async def _first(awaitable: Awaitable[object], stopping: asyncio.Event) -> bool:
    """Wait for awaitable or stopping; True when stopping came first (awaitable cancelled)."""
    done = asyncio.ensure_future(awaitable)
    stop = asyncio.ensure_future(stopping.wait())
    await asyncio.wait({done, stop}, return_when=asyncio.FIRST_COMPLETED)
    stop.cancel()
    if done.done():
        return False
    done.cancel()
    return True


class Service:
    """One service's child process: started, restarted when it dies, held and stopped."""

    def __init__(
        self,
        name: str,
        args: Sequence[str],
        env: Mapping[str, str],
        *,
        on_start: Callable[[str, int], None],
        log: structlog.stdlib.BoundLogger,
    ) -> None:
        self.name = name
        self.args = tuple(args)
        self.env = dict(env)
        self._on_start = on_start
        self._log = log.bind(service=name)
        self._restarts = Restarts()
        self._held = False
        self._released = asyncio.Event()
        self._stopped_on_purpose = False
        self.process: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    async def start(self) -> int:
        self.process = await spawn(self.args, self.env)
        self._stopped_on_purpose = False
        self._restarts.started()
        self._on_start(self.name, self.process.pid)
        return self.process.pid

    async def supervise(self, stopping: asyncio.Event) -> None:
        """Restart the child whenever it exits, until stopping is set (started already)."""
        while self.process is not None:
            if await _first(self.process.wait(), stopping):
                return
            if await _stopped_within(stopping, _SETTLE_S):
                return
            if self._stopped_on_purpose:
                self._stopped_on_purpose = False
            else:
                delay = self._restarts.delay()
                self._log.error(
                    "service exited unexpectedly; restarting it",
                    pid=self.process.pid,
                    exit=describe_exit(self.process.returncode),
                    restart_in_s=round(delay, 2),
                    restarts=self._restarts.count,
                )
                if await _stopped_within(stopping, delay):
                    return
            if self._held and await _first(self._released.wait(), stopping):
                return
            await self.start()
            self._log.info("service restarted", pid=self.pid, restarts=self._restarts.count)

    async def hold(self, grace_s: float = STOP_GRACE_S) -> None:
        """Stop the child on purpose and keep it stopped until release() (supervise restarts
        it then)."""
        self._held = True
        self._released.clear()
        if self.process is not None and self.process.returncode is None:
            self._stopped_on_purpose = True
            self._log.info("stopping service until it is released", pid=self.process.pid)
            await terminate(self.process, grace_s)

    def release(self) -> None:
        self._held = False
        self._released.set()

    async def restart(self, grace_s: float = STOP_GRACE_S) -> None:
        """Stop the child on purpose; supervise starts it again at once."""
        await self.hold(grace_s)
        self.release()

    async def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """The final stop (call once supervise has returned)."""
        if self.process is not None:
            await terminate(self.process, grace_s)


async def terminate(process: asyncio.subprocess.Process, grace_s: float) -> None:
    """SIGTERM, up to grace_s for it to exit, then SIGKILL; return once it has exited."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), grace_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
