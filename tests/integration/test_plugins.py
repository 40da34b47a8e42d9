"""The example plugin's tool used by a native session (a real worker on real PostgreSQL, the
plugin installed into the venv and loaded from its entry point), while the deliberately broken
plugin is reported and does not stop the worker; `GET /v1/plugins` lists both."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest

from keel_stream.kernel import CommitRequest
from keel_stream.plugins import PluginCatalog
from keel_stream.store import PostgresLedger
from tests.support.api import serve_api
from tests.support.plugin_packages import plugins_in_use
from tests.support.workers import log_of, settled, worker_task


@pytest.fixture
def plugins() -> Iterator[PluginCatalog]:
    with plugins_in_use() as catalog:
        yield catalog


async def say(ledger: PostgresLedger, text: str) -> None:
    request = CommitRequest(tenant_id="acme", session_id="s1", kind="user.message",
                            payload={"text": text})  # fmt: skip
    await ledger.commit(request)


async def test_a_native_session_uses_the_example_plugins_tool(
    plugins: PluginCatalog,
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    session: tuple[str, str],
) -> None:
    assert plugins.reports["keel-plugin-broken"].status == "error"
    async with worker_task(database_dsn):
        await say(ledger, 'count them [[tool:word_count {"text": "the quick brown fox"}]]')
        await settled(pool, "s1", "done", "failed")
        events = await log_of(ledger, "s1")
        assert [e.kind for e in events] == [
            "user.message", "assistant.message", "tool.result", "assistant.message",
            "run.finished",
        ]  # fmt: skip
        result = events[2].payload
        assert (result["content"], result["isError"]) == (
            [{"type": "text", "text": "4 words"}],
            False,
        )
        assert events[4].payload["status"] == "done"

        # The worker goes on serving: a second input, its arguments refused by the schema.
        await say(ledger, 'again [[tool:word_count {"text": 7}]]')
        await settled(pool, "s1", "done", "failed")
        refused = [e for e in await log_of(ledger, "s1") if e.kind == "tool.result"][-1]
        assert refused.payload["isError"] is True
        assert "invalid arguments for tool 'word_count' (it was not run)" in str(
            refused.payload["content"]
        )


async def test_the_api_lists_the_plugins_with_versions_and_failures(database_dsn: str) -> None:
    with plugins_in_use():
        async with serve_api(database_dsn) as api, api.client() as client:
            response = await client.get("/v1/plugins")
            anonymous = await client.get("/v1/plugins", headers={"Authorization": ""})
    assert response.status_code == 200
    assert anonymous.status_code == 401
    body = response.json()
    assert body["groups"] == ["keel_stream.tools", "keel_stream.providers",
                              "keel_stream.projections"]  # fmt: skip
    assert body["projectionsHosted"] is False
    listed: dict[str, Any] = {p["distribution"]: p for p in body["plugins"]}
    example, broken = listed["keel-plugin-example"], listed["keel-plugin-broken"]
    assert (example["status"], example["version"]) == ("loaded", "0.3.1")
    assert [t["name"] for t in example["tools"]] == ["word_count"]
    assert example["tools"][0]["schemaDigest"].startswith("sha256:")
    assert (broken["status"], broken["version"]) == ("error", "0.0.1")
    assert "broken on purpose" in broken["error"]
    assert broken["entryPoints"] == {"keel_stream.tools": ["broken_tool"]}
