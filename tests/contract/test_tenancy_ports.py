"""The tenants' configuration documents and API keys: one contract per port, both backends."""

from __future__ import annotations

import pytest

from keel_stream.errors import InvalidConfig, NotFound, TenantNotFound
from keel_stream.store import Store
from tests.contract.backends import InMemory, OnPostgres

SMALL = {"settings": {"models": {"fast": {"provider": "fake", "model": "m1"}}}}


class TenantConfigsContract:
    async def test_each_put_is_a_new_version_and_latest_is_the_newest(self, backend: Store) -> None:
        configs = backend.tenant_configs()
        assert await configs.latest("acme") is None
        assert await configs.put("acme", SMALL) == 1
        assert await configs.put("acme", {}) == 2
        latest = await backend.tenant_configs().latest("acme")
        assert latest is not None, "the backend hands out the same documents every time"
        assert (latest.version, latest.config.document()) == (2, {})

    async def test_a_bad_document_is_refused_before_the_tenant_is_looked_up(
        self, backend: Store
    ) -> None:
        configs = backend.tenant_configs()
        with pytest.raises(InvalidConfig):
            await configs.put("nobody", {"settings": {"models": "many"}})
        with pytest.raises(TenantNotFound):
            await configs.put("nobody", SMALL)
        assert await configs.latest("nobody") is None


class TestTenantConfigsOnPostgres(OnPostgres, TenantConfigsContract):
    pass


class TestTenantConfigsInMemory(InMemory, TenantConfigsContract):
    pass


class KeysContract:
    async def test_a_key_acts_for_its_tenant_until_it_is_revoked(self, backend: Store) -> None:
        keys = backend.keys()
        key_id, key = await keys.create("acme")
        assert await keys.principal_for(key) == ("acme", key_id)
        assert await keys.tenant_for(key) == "acme"
        assert await keys.tenant_for(key + "x") is None
        await keys.revoke(key_id)
        assert await keys.principal_for(key) is None
        with pytest.raises(NotFound):
            await keys.revoke(key_id)
        with pytest.raises(NotFound):
            await keys.create("nobody")

    async def test_a_wanted_secret_becomes_the_key(self, backend: Store) -> None:
        key_id, key = await backend.keys().create("acme", "keel_wanted")
        assert key == "keel_wanted"
        assert await backend.keys().principal_for("keel_wanted") == ("acme", key_id)

    async def test_a_console_sign_in_lives_while_its_key_does(self, backend: Store) -> None:
        keys = backend.keys()
        key_id, key = await keys.create("acme")
        assert await keys.open_console_session("keel_unknown", 60) is None
        token = await keys.open_console_session(key, 60)
        assert token is not None
        assert await keys.console_principal(token) == ("acme", key_id)
        assert await keys.console_principal(key) is None, "an API key is not a sign-in token"
        await keys.close_console_session(token)
        assert await keys.console_principal(token) is None
        again = await keys.open_console_session(key, 60)
        assert again is not None
        await keys.revoke(key_id)
        assert await keys.console_principal(again) is None


class TestKeysOnPostgres(OnPostgres, KeysContract):
    pass


class TestKeysInMemory(InMemory, KeysContract):
    pass
