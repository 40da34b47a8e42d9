"""The console script, run as a user would."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import asyncpg
import pytest

from keel_stream import __version__
from keel_stream.store.keys import PostgresKeyStore
from tests.support.cli import KEEL, one_line_error, run_keel
from tests.support.cli import run_keel_sync as run
from tests.support.postgres import PgServer, create_database, database_url, unique_name

UNREACHABLE_DSN = "postgresql://nobody@127.0.0.1:1/none"
UNREACHABLE_BROKER = "127.0.0.1:1"


async def test_migrate_command_is_rerunnable(pg_server: PgServer) -> None:
    name = unique_name("keel_cli")
    await create_database(pg_server.admin_dsn, name)
    dsn = database_url(pg_server.admin_dsn, name)
    first = run("migrate", "--database-url", dsn)
    assert first.returncode == 0, first.stderr
    assert "applied: 0001_tenants.sql" in first.stdout
    second = run("migrate", env={"KEEL_DATABASE_URL": dsn})
    assert second.returncode == 0, second.stderr
    assert "applied: nothing new" in second.stdout


def test_migrate_without_a_database_is_a_clear_error() -> None:
    env = {k: v for k, v in os.environ.items() if k != "KEEL_DATABASE_URL"}
    result = subprocess.run(
        [*KEEL, "migrate"], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert "KEEL_DATABASE_URL" in one_line_error(result, "missing_database_url", 2)


def test_migrate_against_unreachable_database_fails_with_a_code() -> None:
    result = run("migrate", "--database-url", UNREACHABLE_DSN)
    one_line_error(result, "store_unavailable", 1)


def test_dev_runs_embedded_until_sigterm_and_leaves_nothing_behind(tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("KEEL_DATABASE_URL", "KEEL_KAFKA_BOOTSTRAP")
    }
    env["KEEL_DATA_DIR"] = str(tmp_path / "keel")
    env["KEEL_API_PORT"] = "0"  # any free port: dev prints the one it got
    log = tmp_path / "dev.log"
    with (
        log.open("w") as stderr,
        subprocess.Popen(
            [*KEEL, "dev"], stdout=subprocess.PIPE, stderr=stderr, text=True, env=env
        ) as proc,
    ):
        try:
            assert proc.stdout is not None
            deadline = time.monotonic() + 90
            lines: list[str] = []
            while time.monotonic() < deadline and not (lines and lines[-1].startswith("ready")):
                line = proc.stdout.readline()
                if not line:
                    break
                lines.append(line)
            assert any(line.startswith("schema version") for line in lines), log.read_text()
            assert lines[-1].startswith("ready"), log.read_text()
            (kafka_line,) = [line for line in lines if line.startswith("kafka: ")]
            (worker_line,) = [line for line in lines if line.startswith("projections worker")]
            (api_line,) = [line for line in lines if line.startswith("api: ")]
            api_port = int(api_line.strip().rsplit(":", 1)[1])
            assert api_port != 0
            assert port_open(api_port), "the printed api URL must answer"
            worker_pid = int(worker_line.split()[-1])
            broker_port = int(kafka_line.split()[1].rsplit(":", 1)[1])
            assert port_open(broker_port), "the embedded broker must be serving"
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0, log.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
    pid_file = tmp_path / "keel" / "postgres" / "postmaster.pid"
    assert not pid_file.exists(), "embedded PostgreSQL must be stopped with dev"
    assert not port_open(broker_port), "the embedded broker must be stopped with dev"
    assert not pid_alive(worker_pid), "the projections worker must be stopped with dev"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("command", ["--help", "migrate --help", "dev --help"])
def test_help(command: str) -> None:
    result = run(*command.split())
    assert result.returncode == 0
    assert "Usage" in result.stdout


def test_version() -> None:
    result = run("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"keel-stream {__version__}"


def test_options_show_the_variable_they_are_bound_to() -> None:
    result = run("api", "--help", env={"COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    for variable in ("KEEL_DATABASE_URL", "KEEL_KAFKA_BOOTSTRAP", "KEEL_API_HOST", "KEEL_API_PORT"):
        assert variable in result.stdout


def test_a_flag_overrides_its_variable() -> None:
    result = run("migrate", "--database-url", UNREACHABLE_DSN, env={"KEEL_DATABASE_URL": "x"})
    assert "127.0.0.1" in one_line_error(result, "store_unavailable", 1)


@pytest.mark.parametrize(
    ("args", "env", "variable"),
    [
        (["api"], {"KEEL_API_PORT": "abc"}, "KEEL_API_PORT"),  # a bound option
        (["api", "--port", "70000"], {}, "KEEL_API_PORT"),  # a flag out of the setting's range
        (["migrate"], {"KEEL_API_PORT": "abc"}, "KEEL_API_PORT"),  # any command reads them all
        (["worker"], {"KEEL_PROVIDER": "bogus"}, "KEEL_PROVIDER"),
        (["migrate"], {"KEEL_RELAY_BATCH_SIZE": "0"}, "KEEL_RELAY_BATCH_SIZE"),
        (["migrate"], {"KEEL_LOG_LEVEL": "loud"}, "KEEL_LOG_LEVEL"),
    ],
)
def test_a_bad_setting_is_one_line(args: list[str], env: dict[str, str], variable: str) -> None:
    result = run(*args, env={"KEEL_DATABASE_URL": UNREACHABLE_DSN, **env})
    assert one_line_error(result, "invalid_setting", 2).startswith(f"{variable}: ")


@pytest.mark.parametrize(
    "args", [["topics", "apply"], ["topics", "describe"], ["tail", "--limit", "1"]]
)
def test_an_unreachable_broker_is_one_line(args: list[str]) -> None:
    result = run(*args, env={"KEEL_KAFKA_BOOTSTRAP": UNREACHABLE_BROKER})
    assert UNREACHABLE_BROKER.split(":")[0] in one_line_error(result, "broker_unavailable", 1)


def test_a_busy_api_port_is_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("api", "--port", str(port), env={"KEEL_DATABASE_URL": UNREACHABLE_DSN})
    assert str(port) in one_line_error(result, "port_in_use", 1)


def test_api_without_its_database_is_one_line() -> None:
    result = run("api", "--port", "0", env={"KEEL_DATABASE_URL": UNREACHABLE_DSN})
    one_line_error(result, "store_unavailable", 1)


def test_dev_refuses_a_busy_port_before_starting_anything(tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("KEEL_DATABASE_URL", "KEEL_KAFKA_BOOTSTRAP")
    }
    env["KEEL_DATA_DIR"] = str(tmp_path / "keel")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        env["KEEL_API_PORT"] = str(taken.getsockname()[1])
        result = subprocess.run(
            [*KEEL, "dev"], capture_output=True, text=True, env=env, timeout=60, check=False
        )
    one_line_error(result, "port_in_use", 1)
    assert not (tmp_path / "keel").exists(), "nothing may start when the port is taken"


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["tail", "--kind", "user.mesage"], "unknown_kind"),
        (["projections", "prune", "transcrpt"], "unknown_projection"),
    ],
)
def test_closed_sets_are_checked_before_anything_runs(args: list[str], code: str) -> None:
    result = run(*args, env={"KEEL_KAFKA_BOOTSTRAP": UNREACHABLE_BROKER})
    assert "one of: " in one_line_error(result, code, 1)


def test_help_lists_the_closed_sets() -> None:
    rebuild = run("projections", "rebuild", "--help", env={"COLUMNS": "200"})
    assert "transcript|run_status|sse" in rebuild.stdout
    tail = run("tail", "--help", env={"COLUMNS": "200"})
    assert "user.message" in tail.stdout


async def test_tenants_and_keys_commands(database_dsn: str, pool: asyncpg.Pool) -> None:
    env = {"KEEL_DATABASE_URL": database_dsn}
    created = await run_keel("tenants", "create", "acme", "--name", "Acme", env=env)
    assert created.returncode == 0, created.stderr
    again = await run_keel("tenants", "create", "acme", env=env)
    assert (again.returncode, "tenant_exists" in again.stderr) == (1, True)
    made = await run_keel("keys", "create", "--tenant", "acme", env=env)
    assert made.returncode == 0, made.stderr
    lines = dict(line.split(":", 1) for line in made.stdout.splitlines())
    key_id, key = lines["key id"].strip(), lines["key"].strip()
    keys = PostgresKeyStore(pool)
    assert await keys.tenant_for(key) == "acme"
    stored = await pool.fetchval("SELECT key_hash FROM api_keys WHERE key_id = $1", key_id)
    assert key not in stored, "only a hash of the key is stored"
    listed = await run_keel("keys", "list", "--tenant", "acme", env=env)
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split()[:4] == ["key", "id", "tenant", "created"]
    assert [row.split()[:2] for row in rows] == [[key_id, "acme"]]
    assert key not in listed.stdout, "a key is shown once, at creation"
    revoked = await run_keel("keys", "revoke", key_id, env=env)
    assert revoked.returncode == 0, revoked.stderr
    assert await keys.tenant_for(key) is None
    active = await run_keel("keys", "list", env=env)
    assert active.stdout.splitlines()[1:] == []
    everything = await run_keel("keys", "list", "--revoked", env=env)
    assert [row.split()[0] for row in everything.stdout.splitlines()[1:]] == [key_id]
    missing = await run_keel("keys", "create", "--tenant", "nobody", env=env)
    one_line_error(missing, "not_found", 1)


def test_sigterm_during_dev_start_up_leaves_nothing_behind(tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("KEEL_DATABASE_URL", "KEEL_KAFKA_BOOTSTRAP")
    }
    env["KEEL_DATA_DIR"] = str(tmp_path / "keel")
    env["KEEL_API_PORT"] = "0"
    log = tmp_path / "dev.log"
    with (
        log.open("w") as out,
        subprocess.Popen([*KEEL, "dev"], stdout=out, stderr=out, env=env) as proc,
    ):
        deadline = time.monotonic() + 60
        # Land the signal while the embedded servers are starting.
        while "embedded postgres started" not in log.read_text() and time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()
    assert not (tmp_path / "keel" / "postgres" / "postmaster.pid").exists(), log.read_text()
    assert (
        '"event": "broker stopped"' in log.read_text()
        or '"event": "broker started"' not in log.read_text()
    )
