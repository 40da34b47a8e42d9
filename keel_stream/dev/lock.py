"""One `keel-stream dev` per data directory: an exclusive lock on <data_dir>/dev.lock.

The lock (flock) is held for the supervisor's whole life and released by the kernel when the
process ends, however it ends (SIGKILL included), so a lock that can be taken proves the dev
that held it is gone. The file holds the holder's pid, to name it in the refusal. The descriptor
is not inherited by children (Python opens files close-on-exec), so a daemonized server started
by dev cannot keep the lock alive after dev died.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from keel_stream.errors import DevAlreadyRunning

__all__ = ["LOCK_FILE", "dev_lock", "ensure_not_running"]

LOCK_FILE: Final = "dev.lock"


def _holder(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 64).decode(errors="replace").strip()
    return text if text.isdigit() else "unknown"


def _refusal(data_dir: Path, fd: int) -> DevAlreadyRunning:
    return DevAlreadyRunning(
        f"keel-stream dev (pid {_holder(fd)}) already runs on {data_dir}; stop it first "
        "or choose another data directory (KEEL_DATA_DIR or --data-dir)"
    )


def _try_lock(fd: int, data_dir: Path) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _refusal(data_dir, fd) from None


def ensure_not_running(data_dir: Path) -> None:
    """DevAlreadyRunning when a live dev holds the data directory's lock; creates nothing."""
    path = data_dir / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        _try_lock(fd, data_dir)  # released again when fd closes
    finally:
        os.close(fd)


@contextlib.contextmanager
def dev_lock(data_dir: Path) -> Iterator[None]:
    """Hold the data directory's lock for the block (creating the directory); refuse with
    DevAlreadyRunning, at once, when another dev holds it."""
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _try_lock(fd, data_dir)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock; the file stays (removing it would race a new holder)
