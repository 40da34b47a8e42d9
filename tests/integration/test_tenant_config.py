"""Tenant configuration documents against real PostgreSQL: versions, the CLI, the API."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import asyncpg
import orjson
import pytest

from keel_stream.errors import InvalidConfig, TenantNotFound
from keel_stream.store import PostgresLedger
from keel_stream.store.tenant_configs import PostgresTenantConfigs
from keel_stream.tenancy.document import parse_config
from tests.support.api import serve_api
from tests.support.cli import one_line_error, run_keel

DOCUMENT: dict[str, Any] = {
    "external": {
        "backends": {
            "dsh": {
                "transport": "stdio",
                "command": "node",
                "args": ["/opt/keel/dsh-keel-sidecar.mjs"],
                "env": {"DSH_MODEL": "${DSH_MODEL}", "DSH_API_KEY": "secret:DSH_API_KEY"},
                "timeoutMs": 60000,
                "maxSessions": 16,
            }
        },
        "tools": {
            "docs": {
                "transport": "http",
                "url": "https://tools.example.com/mcp",
                "headers": {"Authorization": "secret:DOCS_TOKEN"},
            }
        },
        "quota": {"unmetered": "allow", "maxSessionsPerBackend": 32},
    },
    "settings": {
        "models": {"fast": {"provider": "openai", "model": "gpt-4o-mini", "maxTokens": 256}},
        "defaultModel": "fast",
    },
}
LITERAL = "Bearer tok-literal-123"


def _with_literal() -> dict[str, Any]:
    document = copy.deepcopy(DOCUMENT)
    document["external"]["tools"]["docs"]["headers"]["Authorization"] = LITERAL
    return document


async def _stored_documents(pool: asyncpg.Pool) -> list[str]:
    rows = await pool.fetch("SELECT document::text AS text FROM tenant_configs ORDER BY version")
    return [str(row["text"]) for row in rows]


async def test_put_adds_versions_and_latest_reads_the_newest(
    pool: asyncpg.Pool, ledger: PostgresLedger
) -> None:
    await ledger.create_tenant("acme")
    await ledger.create_tenant("other")
    configs = PostgresTenantConfigs(pool)
    assert await configs.latest("acme") is None
    assert await configs.put("acme", DOCUMENT) == 1
    second = copy.deepcopy(DOCUMENT)
    second["external"]["quota"]["unmetered"] = "deny"
    assert await configs.put("acme", parse_config(second)) == 2
    assert await configs.put("other", {}) == 1, "versions count per tenant"
    latest = await configs.latest("acme")
    assert latest is not None
    assert latest.version == 2
    assert latest.config.document() == second
    other = await configs.latest("other")
    assert other is not None
    assert (other.version, other.config.document()) == (1, {})


async def test_put_refuses_a_literal_secret_and_an_unknown_tenant(
    pool: asyncpg.Pool, ledger: PostgresLedger
) -> None:
    await ledger.create_tenant("acme")
    configs = PostgresTenantConfigs(pool)
    with pytest.raises(InvalidConfig, match=r"external\.tools\.docs\.headers\.Authorization"):
        await configs.put("acme", _with_literal())
    with pytest.raises(TenantNotFound):
        await configs.put("nobody", DOCUMENT)
    assert await _stored_documents(pool) == []


async def test_the_cli_sets_and_shows_a_redacted_document(
    database_dsn: str, pool: asyncpg.Pool, ledger: PostgresLedger, tmp_path: Path
) -> None:
    await ledger.create_tenant("acme")
    env = {"KEEL_DATABASE_URL": database_dsn, "DSH_MODEL": "gpt-resolved"}
    missing = await run_keel("tenants", "config", "show", "acme", env=env)
    assert "acme" in one_line_error(missing, "config_not_found", 1)
    path = tmp_path / "config.json"
    path.write_bytes(orjson.dumps(DOCUMENT))
    for version in (1, 2):
        stored = await run_keel("tenants", "config", "set", "acme", str(path), env=env)
        assert stored.returncode == 0, stored.stderr
        assert f"version {version}" in stored.stdout
    shown = await run_keel("tenants", "config", "show", "acme", env=env)
    assert shown.returncode == 0, shown.stderr
    assert orjson.loads(shown.stdout) == {"tenant": "acme", "version": 2, "document": DOCUMENT}
    assert "gpt-resolved" not in shown.stdout


async def test_a_literal_secret_via_the_cli_is_refused_and_not_stored(
    database_dsn: str, pool: asyncpg.Pool, ledger: PostgresLedger, tmp_path: Path
) -> None:
    await ledger.create_tenant("acme")
    path = tmp_path / "literal.json"
    path.write_bytes(orjson.dumps(_with_literal()))
    env = {"KEEL_DATABASE_URL": database_dsn}
    result = await run_keel("tenants", "config", "set", "acme", str(path), env=env)
    message = one_line_error(result, "invalid_config", 1)
    assert "external.tools.docs.headers.Authorization" in message
    assert LITERAL not in result.stdout + result.stderr
    assert await _stored_documents(pool) == []


async def test_get_tenant_config_is_redacted_and_versioned(
    database_dsn: str, pool: asyncpg.Pool
) -> None:
    async with serve_api(database_dsn) as api, api.client() as client:
        before = await client.get("/v1/tenant/config")
        assert before.status_code == 404, before.text
        assert before.json()["error"]["code"] == "config_not_found"
        configs = PostgresTenantConfigs(pool)
        await configs.put("acme", {})
        await configs.put("acme", DOCUMENT)
        response = await client.get("/v1/tenant/config")
        assert response.status_code == 200, response.text
        body = response.json()
        assert (body["tenant"], body["version"], body["document"]) == ("acme", 2, DOCUMENT)
        assert "createdAt" in body
        headers = body["document"]["external"]["tools"]["docs"]["headers"]
        assert headers == {"Authorization": "secret:DOCS_TOKEN"}
        anonymous = await client.get("/v1/tenant/config", headers={"Authorization": ""})
        assert anonymous.status_code == 401


SECRET_VALUE = "sk-live-0123456789abcdefXYZ"
SECRET_SHAPES: list[tuple[str, dict[str, Any], str]] = [
    ("args", {"transport": "stdio", "command": "t", "args": ["--api-key", "v4lue-9a8b7c"]}, ""),
    ("args", {"transport": "stdio", "command": "t", "args": ["--x", SECRET_VALUE]}, ""),
    ("url", {"transport": "http", "url": "https://bob:v4lue-9a8b7c@tools.example.com/"}, ""),
    ("url", {"transport": "http", "url": "https://tools.example.com/?token=v4lue-9a8b7c"}, ""),
]


def _tool(spec: dict[str, Any]) -> dict[str, Any]:
    return {"external": {"tools": {"leaky": spec}}}


async def test_the_cli_refuses_a_secret_shaped_literal_in_args_or_url_with_literal_secret(
    database_dsn: str, pool: asyncpg.Pool, ledger: PostgresLedger, tmp_path: Path
) -> None:
    await ledger.create_tenant("acme")
    env = {"KEEL_DATABASE_URL": database_dsn}
    for field, spec, _ in SECRET_SHAPES:
        path = tmp_path / "leaky.json"
        path.write_bytes(orjson.dumps(_tool(spec)))
        result = await run_keel("tenants", "config", "set", "acme", str(path), env=env)
        message = one_line_error(result, "literal_secret", 1)
        assert f"external.tools.leaky.{field}" in message
        for literal in ("v4lue-9a8b7c", SECRET_VALUE):
            assert literal not in result.stdout + result.stderr
    assert await _stored_documents(pool) == []
    with_refs = _tool(
        {"transport": "stdio", "command": "t", "args": ["--api-key", "secret:TOOL_KEY"]}
    )
    path.write_bytes(orjson.dumps(with_refs))
    stored = await run_keel("tenants", "config", "set", "acme", str(path), env=env)
    assert stored.returncode == 0, stored.stderr


async def test_a_document_stored_with_literal_secrets_is_shown_without_them(
    database_dsn: str, pool: asyncpg.Pool, ledger: PostgresLedger
) -> None:
    """A document stored before the args/url checks existed: still read, never echoed."""
    await ledger.create_tenant("acme")
    leaky = {
        "external": {
            "tools": {
                "a": {"transport": "stdio", "command": "t", "args": ["--api-key", SECRET_VALUE]},
                "b": {
                    "transport": "http",
                    "url": "https://bob:pw-9a8b7c6d@h.example/?key=k-9a8b7c",
                },
            }
        }
    }
    await pool.execute(
        "INSERT INTO tenant_configs (tenant_id, version, document) VALUES ($1, 1, $2::text::jsonb)",
        "acme",
        orjson.dumps(leaky).decode(),
    )
    env = {"KEEL_DATABASE_URL": database_dsn}
    shown = await run_keel("tenants", "config", "show", "acme", env=env)
    assert shown.returncode == 0, shown.stderr
    async with serve_api(database_dsn) as api, api.client() as client:
        response = await client.get("/v1/tenant/config")
    assert response.status_code == 200, response.text
    for text in (shown.stdout, response.text):
        for literal in (SECRET_VALUE, "pw-9a8b7c6d", "k-9a8b7c", "bob"):
            assert literal not in text, (literal, text)
    document = response.json()["document"]
    assert document == orjson.loads(shown.stdout)["document"]
    assert document["external"]["tools"]["a"]["args"] == ["--api-key", "[redacted]"]
