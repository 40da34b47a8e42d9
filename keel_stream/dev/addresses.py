"""The addresses a running `keel-stream dev` chose, in <data_dir>/dev.json, for the other commands.

dev writes the file once it is ready (the database URL, the Kafka bootstrap, the API URL, its pid
and start time) and removes it on a clean stop. A command given no database or broker by flag or
KEEL_* variable takes them from here, but only while that very dev runs (pid and start time), so
a file left by a SIGKILLed dev is never believed. The file is readable by its owner only: a
configured database URL may hold a password.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

from keel_stream.procs import Proc

__all__ = ["ADDRESSES_FILE", "DevAddresses", "remove_addresses", "running_dev", "write_addresses"]

ADDRESSES_FILE: Final = "dev.json"


@dataclass(frozen=True, slots=True)
class DevAddresses:
    """Where a running dev's servers listen."""

    pid: int
    start_ticks: int
    database_url: str
    kafka_bootstrap: str
    api_url: str

    @property
    def proc(self) -> Proc:
        return Proc(self.pid, self.start_ticks)


def write_addresses(
    data_dir: Path, *, database_url: str, kafka_bootstrap: str, api_url: str
) -> None:
    """Record this process's addresses (atomically, mode 0600)."""
    me = Proc.me()
    record = DevAddresses(me.pid, me.start_ticks, database_url, kafka_bootstrap, api_url)
    path = data_dir / ADDRESSES_FILE
    temporary = path.with_suffix(".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(asdict(record), out, indent=1)
    temporary.replace(path)


def remove_addresses(data_dir: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        (data_dir / ADDRESSES_FILE).unlink()


def _parse(text: str) -> DevAddresses | None:
    try:
        fields = json.loads(text)
        record = DevAddresses(**fields)
    except (ValueError, TypeError):
        return None
    typed = all(isinstance(getattr(record, n), int) for n in ("pid", "start_ticks")) and all(
        isinstance(getattr(record, n), str) for n in ("database_url", "kafka_bootstrap", "api_url")
    )
    return record if typed else None


def running_dev(data_dir: Path) -> DevAddresses | None:
    """The addresses of the dev running on this data directory; None when none runs (or its
    file is missing, unreadable, or left by a dev that is gone)."""
    try:
        text = (data_dir / ADDRESSES_FILE).read_text()
    except OSError:
        return None
    record = _parse(text)
    return record if record is not None and record.proc.alive() else None
