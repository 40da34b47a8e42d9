"""Two API processes (`keel-stream api`) sharing one HTTP backend, as the docs recommend: one
replica's graceful stop releases only what it holds, never the shared backend."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from keel_stream.gateway.smoke_runtime import Runtime, until

SIDECAR = [sys.executable, "-m", "keel_stream.gateway.sidecar_ref", "--kind", "agent"]


@pytest.fixture
def http_backend() -> Iterator[tuple[subprocess.Popen[str], str]]:
    """The reference sidecar over HTTP, started by the test (no runtime owns it); its URL."""
    process = subprocess.Popen(
        [*SIDECAR, "--http", "0"], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().split()[1]
        yield process, url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)
        if process.stdout is not None:
            process.stdout.close()


@pytest.fixture
def replicas(
    database_dsn: str, tmp_path: Path, http_backend: tuple[subprocess.Popen[str], str]
) -> Iterator[tuple[Runtime, Runtime]]:
    """Two runtimes on one database and one boot document naming the HTTP backend."""
    backend = {"transport": "http", "url": http_backend[1], "timeoutMs": 5000}
    boot = tmp_path / "boot.json"
    boot.write_bytes(orjson.dumps({"external": {"backends": {"ref": backend}}}))
    pair = (
        Runtime(database_dsn, boot, tmp_path / "a"),
        Runtime(database_dsn, boot, tmp_path / "b"),
    )
    for runtime in pair:
        runtime.data_dir.mkdir()
    first = pair[0]
    first.cli("tenants", "create", "acme")
    key = first.cli("keys", "create", "--tenant", "acme").split("key:", 2)[-1].strip().split()[0]
    try:
        for runtime in pair:
            runtime.key = key
            runtime.start()
        yield pair
    finally:
        for runtime in pair:
            runtime.stop()


def _open(runtime: Runtime) -> str:
    response = runtime.call("POST", "/v1/sessions", {"backend": "ref"})
    assert response.status_code == 201, response.text
    session: str = response.json()["id"]
    return session


def _answered(runtime: Runtime, session: str, text: str) -> dict[str, Any]:
    sent = runtime.call("POST", f"/v1/sessions/{session}/input", {"text": text})
    assert sent.status_code == 201, sent.text

    def finished() -> list[dict[str, Any]]:
        done = runtime.of_type(session, "turn.finished")
        return [e for e in done if e["payload"]["data"]["text"] == f"echo: {text}"]

    (event,) = until(finished, f"the turn answering {text!r} on {runtime.url}")
    answer: dict[str, Any] = event
    return answer


def test_one_runtimes_stop_leaves_a_shared_http_backend_serving_the_others(
    replicas: tuple[Runtime, Runtime], http_backend: tuple[subprocess.Popen[str], str]
) -> None:
    staying, stopping = replicas
    kept = _open(staying)
    _answered(staying, kept, "before")
    theirs = _open(stopping)
    _answered(stopping, theirs, "theirs")

    assert stopping.stop() == 0

    _answered(staying, kept, "after the other stopped")
    _answered(staying, _open(staying), "a new session")
    assert staying.external_status(kept) == "active"
    assert staying.external_status(theirs) == "active", "a stop closes nothing it does not own"
    backend, _ = http_backend
    assert backend.poll() is None, "the shared backend process lives on"
