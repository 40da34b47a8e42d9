"""A relay or worker restarting after a failover starts in well under a second: loading the
`keel-stream` command brings no service's dependencies (the web stack, the agent loop); each
command imports its own when it runs."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("fastapi", "uvicorn", "mcp", "keel_stream.api.app", "keel_stream.worker.worker")


def test_loading_the_command_imports_no_service() -> None:
    probe = (
        f"import sys, keel_stream.cli; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "", f"imported by every command: {loaded}"
