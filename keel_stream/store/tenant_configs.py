"""Tenant configuration documents, versioned: `put` adds a version, `latest` reads the newest.

A document is validated (keel_stream.tenancy.document) before it is stored, so what is stored
holds secret references only: a literal secret was refused before any SQL ran.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import asyncpg

from keel_stream.errors import TenantNotFound
from keel_stream.kernel.commits import check_identifier
from keel_stream.store.driver_errors import translated
from keel_stream.store.sqlfiles import query
from keel_stream.tenancy.document import TenantConfig, parse_config

__all__ = ["PostgresTenantConfigs", "StoredConfig", "TenantConfigs"]


@dataclass(frozen=True, slots=True)
class StoredConfig:
    """One stored version of a tenant's document."""

    version: int
    config: TenantConfig
    created_at: datetime


class TenantConfigs(Protocol):
    """The tenants' configuration documents, versioned: each put is a new version."""

    async def put(self, tenant: str, document: TenantConfig | Mapping[str, object]) -> int:
        """Store a new version of the tenant's document; its version number (1, 2, ...).
        InvalidConfig before anything is stored; TenantNotFound for an unknown tenant."""
        ...

    async def latest(self, tenant: str) -> StoredConfig | None:
        """The newest version of the tenant's document, or None before the first `put`."""
        ...


class PostgresTenantConfigs:
    """The PostgreSQL repository of tenant configuration documents."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def put(self, tenant: str, document: TenantConfig | Mapping[str, object]) -> int:
        """Store a new version of the tenant's document; its version number (1, 2, ...).
        InvalidConfig before anything is stored; TenantNotFound for an unknown tenant."""
        check_identifier(tenant, "tenant")
        source = document.document() if isinstance(document, TenantConfig) else document
        stored = parse_config(source).document()
        async with (
            translated("store tenant config"),
            self._pool.acquire() as conn,
            conn.transaction(),
        ):
            if await conn.fetchval(query("tenant_config_lock_tenant"), tenant) is None:
                raise TenantNotFound(f"tenant {tenant!r} does not exist")
            version = await conn.fetchval(query("tenant_config_insert"), tenant, stored)
        return int(version)

    async def latest(self, tenant: str) -> StoredConfig | None:
        """The newest version of the tenant's document, or None before the first `put`."""
        check_identifier(tenant, "tenant")
        async with translated("read tenant config"):
            row = await self._pool.fetchrow(query("tenant_config_latest"), tenant)
        if row is None:
            return None
        config = parse_config(row["document"], stored=True)  # it may predate a check
        return StoredConfig(int(row["version"]), config, row["created_at"])
