"""A secret reference in a stdio provider's args (issue 26.7) resolves when the provider starts,
and only there: the real process gets the value, the audit and the pidfile keep the reference."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from keel_stream.gateway.audit import AuditLog
from keel_stream.gateway.connection import Connection, ConnectionHooks
from keel_stream.gateway.pidfiles import PidRegistry
from keel_stream.gateway.protocol import ProviderKind
from keel_stream.tenancy.document import BackendSpec

# The secret's value names a variable the sidecar insists on (`--require-env VALUE`): it starts
# only if it was given the value, not the reference.
VALUE = "KEEL_TEST_RESOLVED_7F3A"
SIDECAR = ["-m", "keel_stream.gateway.sidecar_ref", "--kind", "agent"]


async def test_a_secret_reference_in_args_resolves_at_spawn_and_is_never_recorded(
    tmp_path: Path,
) -> None:
    spec = BackendSpec.model_validate(
        {
            "transport": "stdio",
            "command": sys.executable,
            "args": [*SIDECAR, "--require-env", "secret:REQUIRED"],
            "env": {VALUE: f"env:{VALUE}"},
        }
    )
    environ = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "KEEL_SECRET_REQUIRED": VALUE,
        VALUE: "set",
    }
    audit = AuditLog(tmp_path / "audit.jsonl")
    registry = PidRegistry(tmp_path / "pids")
    hooks = ConnectionHooks(environ=environ, audit=audit, registry=registry)
    connection = Connection("external.backends.ref", spec, ProviderKind.AGENT, hooks)
    try:
        await connection.ensure()
        assert connection.up
        (spawned,) = audit.records("provider.spawned")
        argv = Path(f"/proc/{spawned['pid']}/cmdline").read_bytes().split(b"\0")
        assert VALUE.encode() in argv, "the process runs with the resolved value"
        assert spawned["command"][-2:] == ["--require-env", "secret:REQUIRED"]
        assert VALUE not in str(spawned["command"])
        assert "secret:REQUIRED" in registry.path(spawned["pgid"]).read_text()
        assert VALUE not in registry.path(spawned["pgid"]).read_text()
    finally:
        await connection.close()
