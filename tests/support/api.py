"""The API served for real (uvicorn on a loopback port), and SSE reading helpers."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson

from keel_stream.api.app import ApiConfig
from keel_stream.api.limits import ApiLimits
from keel_stream.api.server import api_server
from keel_stream.api.tenant_limits import TenantLimits
from keel_stream.kafka.broker import free_port
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.settings import KeelSettings
from keel_stream.store import PostgresLedger, create_pool
from keel_stream.store.keys import PostgresKeyStore
from keel_stream.tenancy.document import TenantConfig


@dataclass
class Api:
    url: str
    key: str
    config: ApiConfig

    def client(self, key: str | None = None) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {key or self.key}"},
            timeout=30,
        )


@contextlib.asynccontextmanager
async def serve_api(
    database_url: str,
    bootstrap: str | None = None,
    topic_prefix: str = "",
    boot_config: TenantConfig | None = None,
    port: int | None = None,
    tenant_limits: TenantLimits | None = None,
) -> AsyncIterator[Api]:
    """The API on a loopback port (`port` to serve again where an earlier one served)."""
    pool = await create_pool(database_url, max_size=1)
    try:
        ledger = PostgresLedger(pool)
        with contextlib.suppress(Exception):
            await ledger.create_tenant("acme")
        _, key = await PostgresKeyStore(pool).create("acme")
    finally:
        await pool.close()
    settings = KeelSettings()  # the test is this API's edge: its KEEL_* environment
    config = ApiConfig(
        database_url,
        KafkaSettings(bootstrap) if bootstrap else None,
        topic_prefix,
        heartbeat_s=1.0,
        boot_config=boot_config,
        limits=ApiLimits.from_settings(settings),
        tenant_limits=tenant_limits or TenantLimits.from_settings(settings),
        settings=settings,
        environ=os.environ,
    )
    config.data_dir = Path(tempfile.mkdtemp(prefix="keel-api-"))
    port = port or free_port()
    server = api_server(config, "127.0.0.1", port)
    task = asyncio.create_task(server.serve())
    ready = asyncio.create_task(server.ready.wait())
    await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()
    try:
        yield Api(f"http://127.0.0.1:{port}", key, config)
    finally:
        config.draining.set()
        server.should_exit = True
        await asyncio.wait_for(task, 30)
        shutil.rmtree(config.data_dir, ignore_errors=True)


@dataclass(frozen=True)
class SseFrame:
    event: str | None
    id: str | None
    data: str

    def json(self) -> dict[str, object]:
        value = orjson.loads(self.data)
        assert isinstance(value, dict)
        return value


async def read_frames(response: httpx.Response) -> AsyncIterator[SseFrame]:
    """Parse a text/event-stream response into frames (comments are skipped)."""
    event: str | None = None
    frame_id: str | None = None
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if data or event:
                yield SseFrame(event, frame_id, "\n".join(data))
            event, frame_id, data = None, None, []
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                event = value
            elif name == "id":
                frame_id = value
            elif name == "data":
                data.append(value)
