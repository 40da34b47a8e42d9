"""The external-gateway smoke, as a user runs it: the real runtime, real PostgreSQL and the
reference sidecar through 15 named steps, ending with no process left behind."""

from __future__ import annotations

import subprocess
import sys


def test_the_gateway_smoke_passes_its_15_steps_with_no_leftover_process(
    empty_database_dsn: str,
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "keel_stream.dev.gateway_smoke",
            "--database-url",
            empty_database_dsn,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    lines = done.stdout.splitlines()
    assert sum(1 for line in lines if line.startswith("[") and line.endswith("s)")) == 15, output
    assert "SMOKE PASS (15 steps)" in lines, output
    assert "leftover processes: 0" in lines, output
