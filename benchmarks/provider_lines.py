"""Worker memory across oversized ToolProvider answers: what a line over the limit leaves behind.

    python -m benchmarks.provider_lines [--lines 30] [--line-mb 100] [--limit-mib 8] [--smoke]

The worker's own ToolProviders object (in this process) calls ``upper`` on a stdio reference
ToolProvider that answers every ``tools.call`` with one line of ``--line-mb`` MB
(``--oversized-answer``); each call is a tenant of its own, as attempts of many runs would be, so
each line comes from a freshly started provider.  Every call must end as an isError result within
``--bound-s``; the provider is then left to its reclaim.  The resident set (VmRSS) of this
process is read before the first call and after the last (and every provider's group reclaimed).
Then the providers are closed as at the worker's stop, within ``--bound-s``.
``--smoke``: 2 lines of 16 MB.  Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from keel_stream.gateway.smoke_runtime import processes_with
from keel_stream.tenancy.document import ToolSpec
from keel_stream.worker.tool_providers import ToolProviders

MIB = 1024 * 1024


def rss_mb() -> float:
    """This process's resident set, in MB (VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def declaration(line_bytes: int, marker: str) -> ToolSpec:
    args = ["-m", "keel_stream.gateway.sidecar_ref", "--kind", "tool"]
    return ToolSpec.model_validate(
        {
            "transport": "stdio",
            "command": sys.executable,
            "args": [*args, "--oversized-answer", str(line_bytes), "--forbid-env", marker],
        }
    )


async def one_line(providers: ToolProviders, tenant: str, spec: ToolSpec, bound_s: float) -> str:
    """'error' (an isError result, as it must be), 'accepted' or 'hung'."""
    (connection,) = providers.for_tenant(tenant, {"big": spec})
    try:
        _, is_error = await asyncio.wait_for(connection.call("upper", {"text": "hi"}), bound_s)
    except TimeoutError:
        return "hung"
    return "error" if is_error else "accepted"


async def measure(lines: int, line_bytes: int, limit: int, bound_s: float) -> dict[str, Any]:
    marker = f"KEEL_BENCH_MARK_{os.getpid()}"
    spec = declaration(line_bytes, marker)
    providers = ToolProviders(os.environ, max_line_bytes=limit)
    gc.collect()
    before = rss_mb()
    started = time.monotonic()
    outcomes = [await one_line(providers, f"t{i}", spec, bound_s) for i in range(lines)]
    elapsed = time.monotonic() - started
    deadline = time.monotonic() + bound_s
    while processes_with(marker) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    left = len(processes_with(marker))
    gc.collect()
    after = rss_mb()
    try:  # the worker's stop: every connection closed, every group reclaimed
        await asyncio.wait_for(providers.aclose(), bound_s)
        closed = True
    except TimeoutError:
        closed = False
    return {
        "lines": lines,
        "lineMB": round(line_bytes / 1e6, 1),
        "limitBytes": limit,
        "errors": outcomes.count("error"),
        "accepted": outcomes.count("accepted"),
        "hung": outcomes.count("hung"),
        "providersLeft": left,
        "rssBeforeMB": round(before, 1),
        "rssAfterMB": round(after, 1),
        "rssGrowthMB": round(after - before, 1),
        "closedWithinBound": closed,
        "seconds": round(elapsed, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=30)
    parser.add_argument("--line-mb", type=float, default=100.0)
    parser.add_argument("--limit-mib", type=float, default=8.0)
    parser.add_argument("--bound-s", type=float, default=60.0)
    parser.add_argument("--smoke", action="store_true", help="2 lines of 16 MB")
    ns = parser.parse_args()
    lines, line_mb = (2, 16.0) if ns.smoke else (ns.lines, ns.line_mb)
    result = asyncio.run(measure(lines, int(line_mb * 1e6), int(ns.limit_mib * MIB), ns.bound_s))
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
