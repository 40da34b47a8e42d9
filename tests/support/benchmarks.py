"""Running a benchmark as its user does (`python -m benchmarks.NAME ...`) and reading its figures.

A runnable benchmark is a module of benchmarks/ with a `__main__` block, except the entry points
that a benchmark starts as processes of its own (SUPPORT): they take no sizes and print no
figures. Every benchmark's last line of stdout is its figures, one JSON object."""

from __future__ import annotations

import ast
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson

__all__ = ["ROOT", "SUPPORT", "BenchmarkRun", "run_benchmark", "runnable_benchmarks", "started_by"]

ROOT: Final = Path(__file__).resolve().parents[2]
BENCHMARKS: Final = ROOT / "benchmarks"

SUPPORT: Final = {
    "sse_procs": "sse",  # the SSE clients and the bare broadcast benchmarks.sse starts
}
"""Support entry points (a `__main__` block, not a benchmark) -> the benchmark that starts them."""

_TAIL: Final = 3000


def _has_main_block(path: Path) -> bool:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            left, right = node.test.left, node.test.comparators
            if isinstance(left, ast.Name) and left.id == "__name__":
                return any(isinstance(c, ast.Constant) and c.value == "__main__" for c in right)
    return False


def runnable_benchmarks() -> list[str]:
    """The module names of benchmarks/ that run as `python -m benchmarks.NAME`, sorted."""
    return sorted(
        path.stem
        for path in BENCHMARKS.glob("*.py")
        if path.stem not in SUPPORT and _has_main_block(path)
    )


def started_by(benchmark: str, support: str) -> bool:
    """Whether benchmarks/`benchmark`.py starts `python -m benchmarks.<support>`."""
    return f'"benchmarks.{support}"' in (BENCHMARKS / f"{benchmark}.py").read_text()


@dataclass(frozen=True)
class BenchmarkRun:
    command: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    took_s: float
    timed_out: bool

    def said(self) -> str:
        """For a failed assertion: the command, its exit and the tails of its output."""
        exit_ = "timed out" if self.timed_out else f"exit {self.returncode}"
        return (
            f"{' '.join(self.command)}: {exit_} after {self.took_s:.1f} s\n"
            f"--- stdout (tail) ---\n{self.stdout[-_TAIL:]}\n"
            f"--- stderr (tail) ---\n{self.stderr[-_TAIL:]}"
        )

    def figures(self) -> dict[str, Any]:
        """The last line of stdout, parsed: one JSON object (AssertionError otherwise)."""
        lines = self.stdout.strip().splitlines()
        assert lines, f"no stdout\n{self.said()}"
        try:
            figures = orjson.loads(lines[-1])
        except orjson.JSONDecodeError as exc:
            raise AssertionError(f"the last line is not JSON ({exc})\n{self.said()}") from exc
        assert isinstance(figures, dict), f"the last line is not a JSON object\n{self.said()}"
        assert figures, f"the last line is an empty JSON object\n{self.said()}"
        return figures


_STOP_GRACE_S: Final = 60.0


def run_benchmark(name: str, *flags: str, env: Mapping[str, str], timeout_s: float) -> BenchmarkRun:
    """Run benchmarks.`name` to its end (or `timeout_s`); whatever it left running in its
    process group is killed afterwards."""
    command = (sys.executable, "-m", f"benchmarks.{name}", *flags)
    started = time.monotonic()
    child = subprocess.Popen(
        command,
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    timed_out = False
    try:
        stdout, stderr = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        # SIGTERM first: a benchmark that started engines in sessions of their own (out of
        # reach of the group kill below) stops them on the way out.
        child.terminate()
        try:
            stdout, stderr = child.communicate(timeout=_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            stdout, stderr = child.communicate()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
    return BenchmarkRun(
        command=command[1:],
        returncode=child.returncode,
        stdout=stdout,
        stderr=stderr,
        took_s=time.monotonic() - started,
        timed_out=timed_out,
    )
