"""The tenants' configuration documents and API keys in memory: the memory backend's twins of
PostgresTenantConfigs and PostgresKeyStore, with their rules (tests/contract/ runs both)."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from keel_stream.errors import NotFound, TenantNotFound
from keel_stream.kernel.commits import check_identifier
from keel_stream.store.keys import CONSOLE_TOKEN_PREFIX, hash_key
from keel_stream.store.tenant_configs import StoredConfig
from keel_stream.tenancy.document import TenantConfig, parse_config

__all__ = ["MemoryKeyStore", "MemoryTenantConfigs"]

TenantExists = Callable[[str], bool]


class MemoryTenantConfigs:
    """Implements TenantConfigs: every put a new version, checked before it is kept."""

    def __init__(self, tenant_exists: TenantExists) -> None:
        self._tenant_exists = tenant_exists
        self._versions: dict[str, list[StoredConfig]] = {}

    async def put(self, tenant: str, document: TenantConfig | Mapping[str, object]) -> int:
        check_identifier(tenant, "tenant")
        source = document.document() if isinstance(document, TenantConfig) else document
        config = parse_config(parse_config(source).document(), stored=True)
        if not self._tenant_exists(tenant):
            raise TenantNotFound(f"tenant {tenant!r} does not exist")
        versions = self._versions.setdefault(tenant, [])
        versions.append(StoredConfig(len(versions) + 1, config, datetime.now(UTC)))
        return len(versions)

    async def latest(self, tenant: str) -> StoredConfig | None:
        check_identifier(tenant, "tenant")
        versions = self._versions.get(tenant)
        return versions[-1] if versions else None


@dataclass
class _Key:
    tenant: str
    key_id: str
    revoked: bool = False


class MemoryKeyStore:
    """Implements KeyStore: keys kept hashed, console sign-ins bound to their key's life."""

    def __init__(self, tenant_exists: TenantExists) -> None:
        self._tenant_exists = tenant_exists
        self._keys: dict[str, _Key] = {}
        """hash of the key -> its row."""
        self._console: dict[str, tuple[str, datetime]] = {}
        """hash of the token -> (hash of its key, when it expires)."""

    async def create(self, tenant: str, key: str | None = None) -> tuple[str, str]:
        check_identifier(tenant, "tenant")
        if not self._tenant_exists(tenant):
            raise NotFound(f"tenant {tenant!r} does not exist")
        key_id = f"k_{secrets.token_hex(6)}"
        secret = key or f"keel_{secrets.token_urlsafe(32)}"
        self._keys[hash_key(secret)] = _Key(tenant, key_id)
        return key_id, secret

    async def revoke(self, key_id: str) -> None:
        found = [k for k in self._keys.values() if k.key_id == key_id and not k.revoked]
        if not found:
            raise NotFound(f"no active key {key_id!r}")
        found[0].revoked = True

    async def tenant_for(self, key: str) -> str | None:
        principal = await self.principal_for(key)
        return None if principal is None else principal[0]

    async def principal_for(self, key: str) -> tuple[str, str] | None:
        return self._active(hash_key(key))

    def _active(self, hashed: str) -> tuple[str, str] | None:
        row = self._keys.get(hashed)
        return None if row is None or row.revoked else (row.tenant, row.key_id)

    async def open_console_session(self, key: str, lifetime_s: int) -> str | None:
        if self._active(hash_key(key)) is None:
            return None
        token = CONSOLE_TOKEN_PREFIX + secrets.token_urlsafe(32)
        expires = datetime.now(UTC) + timedelta(seconds=lifetime_s)
        self._console[hash_key(token)] = (hash_key(key), expires)
        return token

    async def console_principal(self, token: str) -> tuple[str, str] | None:
        if not token.startswith(CONSOLE_TOKEN_PREFIX):
            return None
        found = self._console.get(hash_key(token))
        if found is None or found[1] <= datetime.now(UTC):
            return None
        return self._active(found[0])

    async def close_console_session(self, token: str) -> None:
        self._console.pop(hash_key(token), None)
