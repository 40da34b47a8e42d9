"""The gateway's audit trail: one JSON object per line, appended to a file and logged.

Records (``event`` field): ``provider.spawned``, ``provider.budget_refused``,
``provider.reclaimed``, ``backend.flooded``, ``sweep.killed``.  Callers pass only what is safe to
keep: a provider's environment goes in as its redacted copy (config.redact_env), never with a
secret value.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import orjson

from keel_stream.logs import get_logger

__all__ = ["AUDIT_FILE", "AuditLog"]

AUDIT_FILE: Final = Path("gateway") / "audit.jsonl"
"""Where the audit file lives, relative to the data directory (KEEL_DATA_DIR)."""

log = get_logger("gateway.audit")


class AuditLog:
    """Appends audit records to ``path`` (created with its directory on first write)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    @classmethod
    def in_data_dir(cls, data_dir: Path | str) -> AuditLog:
        """The runtime's audit log: ``<data_dir>/gateway/audit.jsonl``."""
        return cls(Path(data_dir) / AUDIT_FILE)

    def record(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append one record and log it; the record as written."""
        entry: dict[str, Any] = {"at": datetime.now(UTC).isoformat(), "event": event, **fields}
        line = orjson.dumps(entry, option=orjson.OPT_APPEND_NEWLINE)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One write on an O_APPEND descriptor: concurrent writers never interleave a line.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        log.info(event, **fields)
        return entry

    def records(self, event: str | None = None) -> list[dict[str, Any]]:
        """Every record in the file (of one event, when given); none if there is no file."""
        try:
            lines = self.path.read_bytes().splitlines()
        except FileNotFoundError:
            return []
        entries = [orjson.loads(line) for line in lines if line.strip()]
        return [e for e in entries if event is None or e.get("event") == event]
