"""schemathesis over the published OpenAPI: no 5xx, no response that breaks its schema."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from keel_stream.store import PostgresLedger
from tests.support.api import serve_api

ROOT = Path(__file__).resolve().parents[2]
# One worker: CPython 3.11.7's ast.parse is not thread-safe (hypothesis describes strategies
# with it; two workers raised "AST constructor recursion depth mismatch").
_HOOKS = {
    **os.environ,
    "SCHEMATHESIS_HOOKS": "tests.support.fuzz_hooks",
    "PYTHONPATH": str(ROOT),
}


@pytest.mark.timeout(900)
async def test_schemathesis_finds_no_server_error_and_no_schema_violation(
    database_dsn: str, ledger: PostgresLedger, tmp_path: Path
) -> None:
    async with serve_api(database_dsn) as api:
        await ledger.create_session("acme", "s1")
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "schemathesis.cli", "run", f"{api.url}/openapi.json",
            "--header", f"Authorization: Bearer {api.key}",
            "--checks",
            "no_server_error_but_a_read_model_behind,response_schema_conformance,"
            "status_code_conformance",
            "--exclude-path-regex", "/events/stream$",
            "--max-examples", "20", "--seed", "7", "--workers", "1",
            "--request-timeout", "20",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            cwd=tmp_path, env=_HOOKS,
        )  # fmt: skip
        output, _ = await asyncio.wait_for(process.communicate(), 600)
    text = output.decode()
    assert process.returncode == 0, text[-6000:]
