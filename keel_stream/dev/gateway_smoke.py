"""The external-gateway smoke: the real runtime + real PostgreSQL + the reference sidecar,
through 15 named steps; prints ``SMOKE PASS (15 steps)`` and the leftover process count (0).

    python -m keel_stream.dev.gateway_smoke --database-url postgresql://...  # migrated or empty
    python -m keel_stream.dev.gateway_smoke                                  # embedded PostgreSQL

Exit status 0 on a pass, 1 when a step fails (its name and why on stderr).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import orjson

from keel_stream.errors import InvalidConfig
from keel_stream.gateway.smoke_runtime import (
    Runtime,
    SmokeFailed,
    group_members,
    pgid_of,
    processes_with,
    until,
)
from keel_stream.settings import KeelSettings
from keel_stream.tenancy.document import load_config_file

__all__ = ["main", "run_smoke"]

TENANT: Final = "smoke"
UNAVAILABLE_BOUND_S: Final = 5.0


def _backend(marker: str, *switches: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    args = ["-m", "keel_stream.gateway.sidecar_ref", "--kind", "agent", *switches]
    # The marker is an unused --forbid-env name: it only makes the process findable.
    return {
        "transport": "stdio",
        "command": sys.executable,
        "args": [*args, "--forbid-env", f"SMOKE_LEAK,{marker}"],
        "env": env or {},
        "timeoutMs": 10000,
    }


def boot_document(work: Path, marker: str) -> dict[str, Any]:
    state = str(work / "sidecar-state.json")
    main = _backend(
        f"{marker}_MAIN",
        *("--state-file", state, "--grandchildren", "2", "--require-env", "SMOKE_DECLARED"),
        env={"SMOKE_DECLARED": "secret:SMOKE_TOKEN"},
    )
    return {
        "external": {
            "backends": {
                "ref": main,
                "slow": _backend(f"{marker}_SLOW", "--slow-ms", "300"),
                "free": _backend(f"{marker}_FREE", "--no-usage"),
            },
            "quota": {"unmetered": "deny", "maxSessionsPerBackend": 8},
        },
        "settings": {"models": {"fake": {"provider": "fake", "model": "fake"}}},
    }


class Smoke:
    def __init__(self, runtime: Runtime, work: Path, marker: str) -> None:
        self.rt = runtime
        self.work = work
        self.marker = marker
        self.session = ""
        self.turn = ""
        self.pgids: set[int] = set()

    def _remember_groups(self) -> None:
        for pid in processes_with(self.marker):
            self.pgids.add(pgid_of(pid))

    def _main_sidecar(self) -> int:
        pids: list[int] = until(
            lambda: processes_with(f"{self.marker}_MAIN"), "the ref sidecar runs"
        )
        return pids[0]

    def _expect(self, response: Any, status: int, code: str | None = None) -> dict[str, Any]:
        if response.status_code != status:
            raise SmokeFailed(f"expected {status}, got {response.status_code}: {response.text}")
        body: dict[str, Any] = response.json()
        if code is not None and body["error"]["code"] != code:
            raise SmokeFailed(f"expected error {code}, got {body}")
        return body

    # -- the steps -----------------------------------------------------------------------
    def literal_secret_refused(self) -> None:
        bad = self.work / "literal.json"
        document = boot_document(self.work, self.marker)
        document["external"]["backends"]["ref"]["env"]["SMOKE_DECLARED"] = "Bearer sk-literal"
        bad.write_bytes(orjson.dumps(document))
        try:
            load_config_file(bad)
        except InvalidConfig as exc:
            if "sk-literal" in exc.message:
                raise SmokeFailed("the refusal repeats the secret") from exc
            return
        raise SmokeFailed("a literal secret was accepted")

    def migrate_and_tenant(self) -> None:
        self.rt.cli("migrate")
        self.rt.cli("tenants", "create", TENANT)
        out = self.rt.cli("keys", "create", "--tenant", TENANT)
        self.rt.key = out.split("key:", 2)[-1].strip().split()[0]

    def runtime_starts(self) -> None:
        self.rt.start()
        features = self.rt.call("GET", "/v1/capabilities").json()["features"]
        if features.get("settings.models") is not True:
            raise SmokeFailed(f"capabilities: settings.models is {features.get('settings.models')}")

    def open_session(self) -> None:
        body = self._expect(self.rt.call("POST", "/v1/sessions", {"backend": "ref"}), 201)
        external = body["external"]
        if (external["status"], external["metering"]) != ("active", "external"):
            raise SmokeFailed(f"markers: {external}")
        self.session = body["id"]
        self._remember_groups()

    def minimal_environment(self) -> None:
        # The sidecar requires SMOKE_DECLARED (declared) and refuses SMOKE_LEAK (set in the
        # runtime, not declared): it runs, so it got exactly what it declared.
        environ = Path(f"/proc/{self._main_sidecar()}/environ").read_bytes().split(b"\0")
        names = {item.split(b"=", 1)[0].decode() for item in environ if item}
        if "SMOKE_LEAK" in names or "SMOKE_DECLARED" not in names:
            raise SmokeFailed(f"the sidecar's environment: {sorted(names)}")

    def unmetered_refused(self) -> None:
        before = len(self.rt.call("GET", "/v1/sessions").json()["sessions"])
        self._expect(
            self.rt.call("POST", "/v1/sessions", {"backend": "free"}), 403, "unmetered_refused"
        )
        if len(self.rt.call("GET", "/v1/sessions").json()["sessions"]) != before:
            raise SmokeFailed("a refused session was created")

    def input_delivered(self) -> None:
        body = self._expect(
            self.rt.call(
                "POST", f"/v1/sessions/{self.session}/input", {"text": "hello", "requestId": "s1"}
            ),
            201,
        )
        self.turn = body["turnId"]
        finished = until(
            lambda: self.rt.of_type(self.session, "turn.finished"), "turn.finished recorded"
        )
        payload = finished[0]["payload"]
        if payload["data"]["text"] != "echo: hello" or not payload["usageReported"]:
            raise SmokeFailed(f"turn.finished: {payload}")

    def retry_is_idempotent(self) -> None:
        body = self._expect(
            self.rt.call(
                "POST", f"/v1/sessions/{self.session}/input", {"text": "hello", "requestId": "s1"}
            ),
            200,
        )
        if (body["created"], body["turnId"]) != (False, self.turn):
            raise SmokeFailed(f"retry: {body}")
        if len(self.rt.of_type(self.session, "message.sent")) != 1:
            raise SmokeFailed("the retried input was recorded twice")

    def native_writes_refused(self) -> None:
        self._expect(
            self.rt.call("POST", f"/v1/sessions/{self.session}/run"), 409, "external_session"
        )

    def cancel_reaches_backend(self) -> None:
        slow = self._expect(self.rt.call("POST", "/v1/sessions", {"backend": "slow"}), 201)["id"]
        self.rt.call("POST", f"/v1/sessions/{slow}/input", {"text": "one two three four"})
        body = self._expect(self.rt.call("POST", f"/v1/sessions/{slow}/cancel"), 200)
        if body.get("cancelled") is not True:
            raise SmokeFailed(f"cancel: {body}")
        until(lambda: self.rt.of_type(slow, "turn.cancelled"), "turn.cancelled recorded")

    def crash_marks_unavailable(self) -> None:
        os.kill(self._main_sidecar(), signal.SIGKILL)
        began = time.monotonic()
        until(
            lambda: self.rt.external_status(self.session) == "backend-unavailable",
            "the session is backend-unavailable",
        )
        if time.monotonic() - began > UNAVAILABLE_BOUND_S:
            raise SmokeFailed(f"unavailable only after {time.monotonic() - began:.1f}s")

    def restart_resumes(self) -> None:
        until(lambda: self.rt.external_status(self.session) == "active", "resumed")
        self._remember_groups()
        self._expect(
            self.rt.call("POST", f"/v1/sessions/{self.session}/input", {"text": "again"}), 201
        )
        until(lambda: len(self.rt.of_type(self.session, "turn.finished")) >= 2, "answered")

    def runtime_killed_and_swept(self) -> None:
        self._remember_groups()
        self.rt.kill()  # SIGKILL: no reclaim runs; the sidecars and grandchildren live on
        if not group_members(self.pgids):
            raise SmokeFailed("nothing outlived the runtime: the sweep would prove nothing")
        old = set(self.pgids)
        self.rt.start()
        until(lambda: not group_members(old), "the sweep reclaims every leftover process")
        until(lambda: self.rt.external_status(self.session) == "active", "resumed after sweep")
        self._remember_groups()

    def close_session(self) -> None:
        body = self._expect(self.rt.call("POST", f"/v1/sessions/{self.session}/close"), 200)
        if body["external"]["status"] != "closed":
            raise SmokeFailed(f"close: {body}")
        self._expect(
            self.rt.call("POST", f"/v1/sessions/{self.session}/input", {"text": "late"}),
            409,
            "external_session_closed",
        )
        if not self.rt.of_type(self.session, "session.closed"):
            raise SmokeFailed("the close is not recorded")

    def shutdown_leaves_nothing(self) -> None:
        self._remember_groups()
        status = self.rt.stop()
        if status != 0:
            raise SmokeFailed(f"the runtime exited with status {status}")
        until(lambda: not group_members(self.pgids), "no leftover process after shutdown")

    def steps(self) -> list[tuple[str, Callable[[], None]]]:
        return [
            ("a literal secret is refused", self.literal_secret_refused),
            ("migrate, tenant and key", self.migrate_and_tenant),
            ("the runtime starts with the boot document", self.runtime_starts),
            ("an external session opens", self.open_session),
            ("the sidecar has the minimal environment", self.minimal_environment),
            ("an unmetered backend is refused (deny)", self.unmetered_refused),
            ("input is delivered and its turn recorded", self.input_delivered),
            ("a retried input is delivered once", self.retry_is_idempotent),
            ("native writes are refused", self.native_writes_refused),
            ("cancel reaches the backend", self.cancel_reaches_backend),
            ("a killed sidecar makes its session unavailable", self.crash_marks_unavailable),
            ("the restarted sidecar resumes the session", self.restart_resumes),
            ("a SIGKILLed runtime's leftovers are swept", self.runtime_killed_and_swept),
            ("the session closes", self.close_session),
            ("the runtime stops with 0 leftover processes", self.shutdown_leaves_nothing),
        ]


def run_smoke(database_url: str, say: Callable[[str], None] = print) -> int:
    """Run the 15 steps; 0 on a pass."""
    work = Path(tempfile.mkdtemp(prefix="keel-smoke-"))
    marker = f"SMOKE_{uuid.uuid4().hex[:10].upper()}"
    boot = work / "boot.json"
    boot.write_bytes(orjson.dumps(boot_document(work, marker)))
    env = {"SMOKE_LEAK": "must-not-reach-the-sidecar", "KEEL_SECRET_SMOKE_TOKEN": "t0ken"}
    runtime = Runtime(database_url, boot, work / "data", env)
    runtime.data_dir.mkdir()
    smoke = Smoke(runtime, work, marker)
    steps = smoke.steps()
    try:
        for number, (name, step) in enumerate(steps, 1):
            began = time.monotonic()
            step()
            say(f"[{number:2}/{len(steps)}] {name}: ok ({time.monotonic() - began:.2f}s)")
    except SmokeFailed as exc:
        say(f"SMOKE FAIL at step {number} ({name}): {exc}")
        return 1
    finally:
        runtime.stop()
        leftovers = group_members(smoke.pgids)
        for pid in leftovers:
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(work, ignore_errors=True)
    say(f"SMOKE PASS ({len(steps)} steps)")
    say(f"leftover processes: {len(leftovers)}")
    return 0 if not leftovers else 1


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="keel-smoke-external", description=__doc__)
    parser.add_argument("--database-url", default=KeelSettings().database_url)
    ns = parser.parse_args(argv)
    if ns.database_url:
        sys.exit(run_smoke(ns.database_url))
    from keel_stream.dev.postgres import EmbeddedPostgres

    postgres = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="keel-smoke-pg-")), keep_data=False)
    try:
        sys.exit(run_smoke(postgres.start()))
    finally:
        postgres.stop()


if __name__ == "__main__":
    main()
