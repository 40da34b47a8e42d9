"""API keys: each maps to one tenant; only a SHA-256 hash of the key is stored.

A console sign-in is a credential of its own, opened with a key: a random token (only its hash
stored) bound to that key, with an expiry, revoked at sign-out; a revoked key ends it."""

from __future__ import annotations

import hashlib
import secrets
from typing import Final, Protocol

import asyncpg

from keel_stream.errors import NotFound
from keel_stream.kernel.commits import check_identifier
from keel_stream.store.driver_errors import translated
from keel_stream.store.sqlfiles import query

CONSOLE_TOKEN_PREFIX: Final = "kcs_"  # noqa: S105 - the tokens' prefix, not a secret

__all__ = ["CONSOLE_TOKEN_PREFIX", "KeyStore", "PostgresKeyStore", "hash_key"]


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class KeyStore(Protocol):
    """API keys (stored hashed) and the console sessions they open."""

    async def create(self, tenant: str, key: str | None = None) -> tuple[str, str]:
        """A new key for the tenant: (key_id, key). The key is shown only now."""
        ...

    async def revoke(self, key_id: str) -> None: ...

    async def tenant_for(self, key: str) -> str | None: ...

    async def principal_for(self, key: str) -> tuple[str, str] | None:
        """(tenant, key id) of an active key, or None."""
        ...

    async def open_console_session(self, key: str, lifetime_s: int) -> str | None:
        """A new console sign-in token for an active key (shown only now), or None."""
        ...

    async def console_principal(self, token: str) -> tuple[str, str] | None:
        """(tenant, key id) of a live console sign-in, or None (unknown, expired, signed out,
        or its key revoked). An API key is not a sign-in token."""
        ...

    async def close_console_session(self, token: str) -> None: ...


class PostgresKeyStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def create(self, tenant: str, key: str | None = None) -> tuple[str, str]:
        """A new key for the tenant: (key_id, key). The key is shown only now."""
        check_identifier(tenant, "tenant")
        key_id = f"k_{secrets.token_hex(6)}"
        secret = key or f"keel_{secrets.token_urlsafe(32)}"
        async with translated("create key"):
            if not await self._pool.fetchval(query("tenant_exists"), tenant):
                raise NotFound(f"tenant {tenant!r} does not exist")
            await self._pool.execute(query("insert_api_key"), key_id, tenant, hash_key(secret))
        return key_id, secret

    async def revoke(self, key_id: str) -> None:
        async with translated("revoke key"):
            tenant = await self._pool.fetchval(query("revoke_api_key"), key_id)
        if tenant is None:
            raise NotFound(f"no active key {key_id!r}")

    async def tenant_for(self, key: str) -> str | None:
        principal = await self.principal_for(key)
        return None if principal is None else principal[0]

    async def principal_for(self, key: str) -> tuple[str, str] | None:
        """(tenant, key id) of an active key, or None."""
        async with translated("authenticate"):
            row = await self._pool.fetchrow(query("tenant_for_key"), hash_key(key))
        return None if row is None else (str(row["tenant_id"]), str(row["key_id"]))

    async def open_console_session(self, key: str, lifetime_s: int) -> str | None:
        """A new console sign-in token for an active key (shown only now), or None."""
        token = CONSOLE_TOKEN_PREFIX + secrets.token_urlsafe(32)
        async with translated("open console session"):
            key_id = await self._pool.fetchval(
                query("console_session_open"), hash_key(key), hash_key(token), float(lifetime_s)
            )
        return None if key_id is None else token

    async def console_principal(self, token: str) -> tuple[str, str] | None:
        """(tenant, key id) of a live console sign-in, or None (unknown, expired, signed out,
        or its key revoked). An API key is not a sign-in token."""
        if not token.startswith(CONSOLE_TOKEN_PREFIX):
            return None
        async with translated("authenticate console session"):
            row = await self._pool.fetchrow(query("console_session_principal"), hash_key(token))
        return None if row is None else (str(row["tenant_id"]), str(row["key_id"]))

    async def close_console_session(self, token: str) -> None:
        async with translated("close console session"):
            await self._pool.execute(query("console_session_revoke"), hash_key(token))
