"""Connections and pools: JSON codecs set once, so jsonb columns read and write Python values."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import orjson

from keel_stream.errors import StoreUnavailable
from keel_stream.store.driver_errors import translated

__all__ = ["connect", "create_pool", "init_connection", "pooled"]


def _encode_json(value: Any) -> str:
    return orjson.dumps(value).decode()


async def init_connection(conn: asyncpg.Connection) -> None:
    """Per-connection set-up: json and jsonb use orjson."""
    for type_name in ("json", "jsonb"):
        await conn.set_type_codec(
            type_name,
            encoder=_encode_json,
            decoder=orjson.loads,
            schema="pg_catalog",
            format="text",
        )


async def connect(dsn: str, *, application_name: str | None = None) -> asyncpg.Connection:
    """One connection with keel's codecs (application_name shows in pg_stat_activity)."""
    settings = {"application_name": application_name} if application_name else None
    async with translated("connect"):
        conn = await asyncpg.connect(dsn, server_settings=settings)
        await init_connection(conn)
    return conn


async def create_pool(dsn: str, *, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
    """A pool with keel's codecs on every connection."""
    async with translated("connect"):
        pool = await asyncpg.create_pool(
            dsn, min_size=min_size, max_size=max_size, init=init_connection
        )
    if pool is None:  # only when the pool is created lazily, which keel never asks for
        raise StoreUnavailable("connect: the pool did not start")
    return pool


@asynccontextmanager
async def pooled(dsn: str, *, max_size: int = 2) -> AsyncIterator[asyncpg.Pool]:
    """A short-lived pool, closed when the block ends (command-line tools)."""
    pool = await create_pool(dsn, min_size=1, max_size=max_size)
    try:
        yield pool
    finally:
        await pool.close()
