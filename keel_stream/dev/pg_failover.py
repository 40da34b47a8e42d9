"""A PostgreSQL failover formation from pg_auto_failover: a monitor, a primary and a synchronous
standby, each a `pg_autoctl ... --run` keeper on a loopback port in one temporary directory.

Each keeper runs in its own session, so its process group holds the keeper and the postgres it
supervises: `kill_primary` SIGKILLs the primary's whole group (a machine losing power), and
`stop` ends every group, verified gone. As root, pg_autoctl and postgres run as the `postgres`
user (postgres refuses to run as root). The monitor's health checks are tuned down so a failover
takes seconds, not the default ~30 s: tests and the chaos benchmark measure the client side.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from keel_stream.procs import Proc, group_members, wait_gone

__all__ = ["FailoverFormation", "FormationNode", "find_pg_autoctl"]

_PG_BIN: Final = Path("/usr/lib/postgresql/15/bin")
_STOP_S: Final = 10.0
# Monitor settings (milliseconds): how soon a silent primary is declared dead and its standby
# promoted. The defaults (5 s checks, 20 s unhealthy, 30 s demote timeout) suit real networks.
_FAST_MONITOR: Final = {
    "pgautofailover.health_check_period": 1000,
    "pgautofailover.health_check_timeout": 1000,
    "pgautofailover.health_check_max_retries": 1,
    "pgautofailover.health_check_retry_delay": 500,
    "pgautofailover.node_considered_unhealthy_timeout": 2000,
    "pgautofailover.primary_demote_timeout": 2000,
}


def find_pg_autoctl() -> tuple[Path, Path]:
    """(pg_autoctl, PostgreSQL bin directory); RuntimeError naming the package when missing."""
    autoctl = shutil.which("pg_autoctl")
    if autoctl is None or not (_PG_BIN / "pg_ctl").exists():
        raise RuntimeError(
            "pg_auto_failover is not installed: apt-get install postgresql-15-auto-failover "
            f"(needs pg_autoctl on PATH and {_PG_BIN}/pg_ctl)"
        )
    return Path(autoctl), _PG_BIN


@dataclass
class FormationNode:
    """One keeper: its name, port, data directory and process group while it runs."""

    name: str
    port: int
    pgdata: Path
    group: Proc | None = None
    killed: bool = False
    process: subprocess.Popen[bytes] | None = None

    def dsn(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"


def _free_ports(count: int) -> list[int]:
    import socket

    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class FailoverFormation:
    """Start with `await start()` (returns the multi-host DSN); `stop()` leaves nothing running."""

    def __init__(self, database: str = "keel", root: Path | None = None) -> None:
        self._autoctl, self._bin = find_pg_autoctl()
        self._root = root or Path(tempfile.mkdtemp(prefix="keel-pgaf-"))
        self._database = database
        ports = _free_ports(3)
        self.monitor = FormationNode("monitor", ports[0], self._root / "monitor")
        self.nodes = [
            FormationNode(f"node{i}", port, self._root / f"node{i}")
            for i, port in enumerate(ports[1:], start=1)
        ]
        self._user = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
        if self._user is not None:
            os.chown(self._root, self._user.pw_uid, self._user.pw_gid)

    @property
    def dsn(self) -> str:
        """Every node, the writable one chosen at connect time (asyncpg and libpq alike)."""
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        return f"postgresql://postgres@{hosts}/{self._database}?target_session_attrs=read-write"

    def server_version(self) -> str:
        """What the formation's PostgreSQL reports (`postgres (PostgreSQL) 15.14 ...`)."""
        shown = subprocess.run(
            [str(self._bin / "postgres"), "--version"],
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        return shown.stdout.strip()

    @property
    def monitor_dsn(self) -> str:
        return self.monitor.dsn("pg_auto_failover")

    def _env(self) -> dict[str, str]:
        """A clean environment: no PG* variable of the caller leaks into the engine."""
        return {
            "PATH": f"{self._bin}:/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "HOME": str(self._root),
            "XDG_CONFIG_HOME": str(self._root / "config"),
            "XDG_DATA_HOME": str(self._root / "share"),
        }

    def _spawn(self, node: FormationNode, args: list[str]) -> None:
        log = (self._root / f"{node.name}.log").open("ab")
        user: dict[str, Any] = {}
        if self._user is not None:
            user = {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}
        process = subprocess.Popen(
            [str(self._autoctl), *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self._env(),
            cwd=self._root,
            start_new_session=True,
            **user,
        )
        log.close()
        node.process = process
        node.group = Proc.of(process.pid)

    async def start(self, timeout_s: float = 120.0) -> str:
        """Monitor, then a primary, then its standby; returns once both report their state."""
        common = ["--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl", "--run"]
        self._spawn(
            self.monitor,
            [
                *("create", "monitor", "--pgdata", str(self.monitor.pgdata)),
                *self._port(self.monitor),
                *common,
            ],
        )
        await self._wait(self._monitor_ready, timeout_s, "the monitor")
        await self._tune_monitor()
        monitor = f"{self.monitor_dsn}?sslmode=disable"
        for node in self.nodes:
            self._spawn(
                node,
                [
                    *("create", "postgres", "--pgdata", str(node.pgdata), *self._port(node)),
                    *("--dbname", self._database, "--monitor", monitor, "--name", node.name),
                    *("--pgctl", str(self._bin / "pg_ctl"), *common),
                ],
            )
            count = self.nodes.index(node) + 1
            await self._wait(functools.partial(self._settled, count), timeout_s, node.name)
            if count == 1:
                await self._fast_checkpoints(node)
        return self.dsn

    @staticmethod
    def _port(node: FormationNode) -> list[str]:
        return ["--pgport", str(node.port)]

    async def _wait(self, ready: Any, timeout_s: float, what: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not await ready():
            self._check_alive()
            if loop.time() > deadline:
                raise TimeoutError(f"pg_auto_failover: {what} not ready after {timeout_s}s")
            await asyncio.sleep(0.2)

    def _check_alive(self) -> None:
        for node in (self.monitor, *self.nodes):
            if node.group is not None and not node.killed and not node.group.alive():
                log = (self._root / f"{node.name}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"pg_autoctl {node.name} exited:\n{log}")

    async def _run(self, *argv: str) -> tuple[int, str]:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=self._env(),
        )
        out, _ = await process.communicate()
        return process.returncode or 0, out.decode()

    async def _states(self) -> list[dict[str, Any]] | None:
        """The monitor's view of each node (`pg_autoctl show state`); None while it is down."""
        code, out = await self._run(
            str(self._autoctl), "show", "state", "--monitor", self.monitor_dsn, "--json"
        )
        try:
            return list(json.loads(out)) if code == 0 else None
        except ValueError:
            return None

    async def _settle(self, node: FormationNode, *settings: str) -> None:
        """ALTER SYSTEM on one server (psql: the engine's own admin client), then reload."""
        argv = [str(self._bin / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1"]
        argv += ["-d", node.dsn("postgres" if node is not self.monitor else "pg_auto_failover")]
        for setting in (*settings, "SELECT pg_reload_conf()"):
            argv += ["-c", setting]
        code, _ = await self._run(*argv)
        if code != 0:
            raise RuntimeError(f"pg_auto_failover: could not configure {node.name}: {settings}")

    async def _monitor_ready(self) -> bool:
        return await self._states() is not None

    async def _tune_monitor(self) -> None:
        await self._settle(
            self.monitor, *(f"ALTER SYSTEM SET {k} = {v}" for k, v in _FAST_MONITOR.items())
        )

    async def _fast_checkpoints(self, node: FormationNode) -> None:
        """The standby's pg_basebackup waits for a spread checkpoint (~90 s here): unspread."""
        await self._settle(node, "ALTER SYSTEM SET checkpoint_completion_target = 0")

    async def _settled(self, count: int) -> bool:
        states = await self._states()
        if states is None or len(states) != count:
            return False
        settled = sorted(
            str(s["current_group_state"])
            for s in states
            if s["current_group_state"] == s["assigned_group_state"]
        )
        return settled == (["single"] if count == 1 else ["primary", "secondary"])

    async def _writable_ports(self) -> set[int]:
        writable = ("primary", "single", "wait_primary")
        return {
            int(s["nodeport"])
            for s in await self._states() or []
            if s["current_group_state"] == s["assigned_group_state"]
            and s["current_group_state"] in writable
        }

    async def primary(self) -> FormationNode:
        """The node the monitor names primary (reported and assigned)."""
        ports = await self._writable_ports()
        for node in self.nodes:
            if node.port in ports:
                return node
        raise RuntimeError("pg_auto_failover: no primary")

    async def kill_primary(self, node: FormationNode | None = None) -> FormationNode:
        """SIGKILL the primary's keeper and postgres (its whole process group), verified gone;
        returns it. `node`: the primary as the caller already found it, killed without asking
        the monitor again."""
        node = node or await self.primary()
        node.killed = True
        members = [m.proc for m in group_members(node.group.pid)] if node.group else []
        self._kill_group(node, signal.SIGKILL)
        if await asyncio.to_thread(wait_gone, members, _STOP_S):
            raise RuntimeError(f"pg_auto_failover: {node.name} survived SIGKILL")
        return node

    async def wait_promoted(self, old: FormationNode, timeout_s: float = 60.0) -> FormationNode:
        """Wait until another node is the writable primary; returns it."""

        async def promoted() -> bool:
            return bool((await self._writable_ports()) - {old.port})

        await self._wait(promoted, timeout_s, "a new primary")
        return await self.primary()

    async def rejoin(self, node: FormationNode, timeout_s: float = 120.0) -> None:
        """Start a killed node's keeper again on its data directory: it rejoins as the standby
        (rewound to the new primary's timeline); returns once the formation is a primary and
        a secondary again."""
        node.killed = False
        self._spawn(node, ["run", "--pgdata", str(node.pgdata)])
        settled = functools.partial(self._settled, len(self.nodes))
        await self._wait(settled, timeout_s, f"{node.name} to rejoin as the standby")

    def _kill_group(self, node: FormationNode, signum: int) -> None:
        if node.group is None:
            return
        pgid = node.group.pid
        for member in group_members(pgid):
            member.proc.signal(signum)

    def stop(self) -> None:
        """Stop every keeper and postgres (fast shutdown, then SIGKILL), verified gone; the
        directory is removed. Nothing of the formation runs afterwards."""
        everyone = [self.monitor, *self.nodes]
        members = [m.proc for node in everyone if node.group for m in group_members(node.group.pid)]
        for node in everyone:
            self._kill_group(node, signal.SIGINT)
        if wait_gone(members, _STOP_S):
            for node in everyone:
                self._kill_group(node, signal.SIGKILL)
            if wait_gone(members, _STOP_S):
                raise RuntimeError("pg_auto_failover: processes survived SIGKILL")
        for node in everyone:
            if node.process is not None:
                node.process.wait()  # gone already: reaps the keeper
            node.group, node.process = None, None
        _remove_shared_memory(everyone)
        shutil.rmtree(self._root, ignore_errors=True)


def _remove_shared_memory(nodes: list[FormationNode]) -> None:
    """A SIGKILLed postmaster leaves its System V segment; postmaster.pid names it (line 7)."""
    for node in nodes:
        try:
            lines = (node.pgdata / "postmaster.pid").read_text().splitlines()
            shm_id = lines[6].split()[1]
        except (OSError, IndexError):
            continue
        subprocess.run(["ipcrm", "-m", shm_id], capture_output=True, check=False)  # noqa: S607
