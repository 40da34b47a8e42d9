"""API replicas (`keel-stream api` processes) behind HAProxy (keel_stream.dev.haproxy)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from keel_stream.dev.haproxy import Haproxy, Replica
from keel_stream.kafka.broker import free_port
from keel_stream.procs import die_with_parent
from tests.support.wait import wait_until

READY_S = 90.0


@dataclass
class ApiProcess:
    """One `keel-stream api` replica, its output in `log`."""

    replica: Replica
    process: asyncio.subprocess.Process
    log: Path

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 30)
            except TimeoutError:
                self.process.kill()
        await self.process.wait()


@dataclass
class Balanced:
    """The balancer and the replicas behind it, by name (api0, api1, ...)."""

    haproxy: Haproxy
    apis: dict[str, ApiProcess]

    @property
    def url(self) -> str:
        return self.haproxy.url

    def client(self, key: str, timeout_s: float = 30) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=timeout_s
        )

    async def wait_states(self, expected: Mapping[str, str], timeout_s: float) -> None:
        """Until HAProxy sees each named replica in its expected state (UP, DOWN)."""

        async def seen() -> bool:
            for name in expected:
                api = self.apis[name]
                exited = api.process.returncode
                assert exited is None or expected[name] == "DOWN", api.log.read_text()[-3000:]
            states = await asyncio.to_thread(self.haproxy.states)
            return all(states.get(name) == state for name, state in expected.items())

        await wait_until(seen, timeout_s, f"haproxy to see {dict(expected)}", interval_s=0.1)


async def start_api(name: str, env: Mapping[str, str], work_dir: Path) -> ApiProcess:
    """`keel-stream api` on a free port, with `env` as its only KEEL_* settings."""
    data_dir = work_dir / name
    data_dir.mkdir(parents=True, exist_ok=True)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}
    environment.update({**env, "KEEL_DATA_DIR": str(data_dir)})
    port = free_port()
    log = work_dir / f"{name}.log"
    with log.open("ab") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "keel_stream", "api", "--port", str(port),
            env=environment, stdout=out, stderr=out, preexec_fn=die_with_parent(),
        )  # fmt: skip
    return ApiProcess(Replica(name, port), process, log)


@contextlib.asynccontextmanager
async def api_replicas(
    env: Mapping[str, str], work_dir: Path, count: int = 2
) -> AsyncIterator[Balanced]:
    """`count` API replicas behind HAProxy, each UP (its /readyz 200) when the block starts."""
    apis: dict[str, ApiProcess] = {}
    haproxy: Haproxy | None = None
    try:
        for n in range(count):
            apis[f"api{n}"] = await start_api(f"api{n}", env, work_dir)
        replicas = [api.replica for api in apis.values()]
        # Started from this thread: HAProxy dies with it (die_with_parent), not with a pool's.
        haproxy = Haproxy(work_dir / "haproxy", replicas).start()
        balanced = Balanced(haproxy, apis)
        await balanced.wait_states(dict.fromkeys(apis, "UP"), READY_S)
        yield balanced
    finally:
        await asyncio.gather(*(api.stop() for api in apis.values()))
        if haproxy is not None:
            haproxy.stop()
