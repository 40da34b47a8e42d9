"""The native agent's choice of model settings and the naming of provider tools, without servers."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from keel_stream.kernel import Event
from keel_stream.store.tenant_configs import StoredConfig
from keel_stream.tenancy.document import ModelSettings, TenantConfig, ToolSpec, parse_config
from keel_stream.worker.agent_settings import (
    AttemptSettings,
    ModelProviders,
    ResolvedConfig,
    SettingsRefused,
    TenantConfigCache,
    TurnModel,
    choose_model,
    selection_for_turn,
)
from keel_stream.worker.providers import FakeProvider, OpenAIProvider, ProviderRequest
from keel_stream.worker.providers.chat_wire import chat_body
from keel_stream.worker.tool_providers import ProviderConnection, ToolProviders, result_text
from keel_stream.worker.toolbox import Toolbox, exposed_name
from keel_stream.worker.tools import TOOLS
from tests.support.tool_transports import LoopbackProviders

DOCUMENT: dict[str, Any] = {
    "settings": {
        "models": {
            "fast": {"provider": "fake", "model": "fast-1", "contextBudgetChars": 500},
            "smart": {
                "provider": "openai",
                "model": "gpt-smart",
                "systemPrompt": "Be brief.",
                "temperature": 0.3,
                "maxTokens": 64,
            },
        },
        "defaultModel": "fast",
    }
}
FALLBACK = TurnModel(FakeProvider(), 1000)


def resolved(document: Mapping[str, Any] = DOCUMENT, version: int | str = 3) -> ResolvedConfig:
    return ResolvedConfig(parse_config(document), version)


def pick(model: str) -> dict[str, Any]:
    return {"model": model}


# -- which input's selection wins ---------------------------------------------------------------


def test_the_latest_presented_input_carrying_a_selection_wins() -> None:
    inputs = [(1, pick("a")), (2, pick("b")), (3, None), (4, pick("c")), (5, None)]
    assert selection_for_turn(inputs, {3, 4, 5}) == pick("c")


def test_without_one_among_the_presented_the_latest_earlier_input_decides() -> None:
    inputs = [(1, pick("a")), (2, pick("b")), (3, None), (4, {"temperature": 1})]
    assert selection_for_turn(inputs, {3, 4}) == pick("b")


def test_an_input_after_the_presented_ones_does_not_decide() -> None:
    assert selection_for_turn([(1, None), (2, pick("late"))], {1}) is None


def test_with_nothing_presented_the_latest_input_decides() -> None:
    assert selection_for_turn([(2, pick("b")), (1, pick("a"))], set()) == pick("b")


def test_no_selection_anywhere_is_none() -> None:
    assert selection_for_turn([(1, None), (2, {})], {2}) is None
    assert selection_for_turn([], set()) is None


# -- which settings apply -----------------------------------------------------------------------


def test_no_document_or_no_models_keeps_the_workers_provider() -> None:
    assert choose_model(None, pick("smart"), FALLBACK, ModelProviders()) is FALLBACK
    bare = resolved({"external": {}})
    assert choose_model(bare, pick("smart"), FALLBACK, ModelProviders()) is FALLBACK


def test_models_without_a_default_and_no_selection_keep_the_workers_provider() -> None:
    document = {"settings": {"models": DOCUMENT["settings"]["models"]}}
    assert choose_model(resolved(document), None, FALLBACK, ModelProviders()) is FALLBACK


def test_the_selected_model_applies_with_all_its_settings() -> None:
    providers = ModelProviders("http://models.example/v1", "sk-x")
    model = choose_model(resolved(), pick("smart"), FALLBACK, providers)
    assert isinstance(model.provider, OpenAIProvider)
    assert (model.provider.name, model.provider.model) == ("openai", "gpt-smart")
    assert (model.system_prompt, model.temperature, model.max_tokens) == ("Be brief.", 0.3, 64)
    assert model.budget_chars == FALLBACK.budget_chars, "no contextBudgetChars: the worker's"
    assert model.settings_record() == {"model": "smart", "configVersion": 3}


def test_the_default_model_applies_without_a_selection() -> None:
    model = choose_model(resolved(version="boot"), None, FALLBACK, ModelProviders())
    assert (model.provider.name, model.provider.model) == ("fake", "fast-1")
    assert model.budget_chars == 500
    assert model.system_prompt is None
    assert model.settings_record() == {"model": "fast", "configVersion": "boot"}


def test_an_undeclared_model_is_refused() -> None:
    with pytest.raises(SettingsRefused, match=r"'gone'.*config version 3"):
        choose_model(resolved(), pick("gone"), FALLBACK, ModelProviders())


def test_an_unknown_provider_is_refused() -> None:
    document = {"settings": {"models": {"x": {"provider": "acme-llm", "model": "m"}}}}
    with pytest.raises(SettingsRefused, match="acme-llm"):
        choose_model(resolved(document), pick("x"), FALLBACK, ModelProviders())


def test_model_providers_reuse_one_provider_per_model() -> None:
    providers = ModelProviders()
    settings = ModelSettings(provider="openai", model="m1")
    assert providers(settings) is providers(ModelSettings(provider="openai", model="m1"))
    assert providers(settings) is not providers(ModelSettings(provider="openai", model="m2"))


def _input(seq: int, selection: dict[str, Any] | None = None) -> Event:
    payload: dict[str, Any] = {"text": "hi"}
    if selection is not None:
        payload["selection"] = selection
    return Event(
        tenant="acme", session="s1", seq=seq, kind="user.message", payload=payload,
        committed_at=datetime.now(UTC),
    )  # fmt: skip


def test_a_turn_presenting_nothing_keeps_the_attempts_choice() -> None:
    settings = AttemptSettings(resolved(), FALLBACK, ModelProviders())
    settings.observe([_input(1, pick("smart"))])
    first = settings.model_for({1})
    settings.observe([_input(2, pick("fast"))])
    assert settings.model_for(set()) is first
    assert settings.model_for({2}).settings_name == "fast"


# -- which document applies ---------------------------------------------------------------------


class Reader:
    def __init__(self) -> None:
        self.stored: StoredConfig | None = None
        self.reads = 0

    async def latest(self, tenant: str) -> StoredConfig | None:
        self.reads += 1
        return self.stored


async def test_a_stored_document_wins_over_the_boot_one_and_is_cached_briefly() -> None:
    reader, now = Reader(), [0.0]
    boot = TenantConfig()
    cache = TenantConfigCache(reader, boot, ttl_s=2.0, clock=lambda: now[0])
    first = await cache.resolve("acme")
    assert first is not None
    assert (first.config, first.version) == (boot, "boot")
    reader.stored = StoredConfig(7, parse_config(DOCUMENT), datetime.now(UTC))
    assert await cache.resolve("acme") == first, "within the ttl: no second read"
    assert reader.reads == 1
    now[0] = 2.5
    second = await cache.resolve("acme")
    assert second is not None
    assert second.version == 7
    assert reader.reads == 2


async def test_no_reader_and_no_boot_document_is_none() -> None:
    assert await TenantConfigCache(None, None).resolve("acme") is None


# -- the wire and the tool names ----------------------------------------------------------------


def test_the_chat_body_carries_the_system_prompt_and_sampling_settings() -> None:
    request = ProviderRequest(
        "t", "s", "g1", [{"role": "user", "content": "hi"}],
        system_prompt="Be brief.", temperature=0.3, max_tokens=64,
    )  # fmt: skip
    body = chat_body("m", request)
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]
    assert (body["temperature"], body["max_tokens"], body["model"]) == (0.3, 64, "m")
    plain = chat_body("m", ProviderRequest("t", "s", "g1", []))
    assert "temperature" not in plain
    assert "max_tokens" not in plain


def test_provider_tools_are_named_provider__tool_within_openais_rules() -> None:
    assert exposed_name("tools", "upper") == "tools__upper"
    assert exposed_name("docs.v2", "search/all") == "docs_v2__search_all"
    assert exposed_name("p", "x" * 70) is None


def test_a_tool_result_is_its_string_or_its_json() -> None:
    assert result_text("HELLO") == "HELLO"
    assert result_text(5) == "5"
    assert result_text({"b": 1, "a": [True, None]}) == '{"a":[true,null],"b":1}'


# -- a tenant's ToolProviders in the toolbox (in-process providers) ----------------------------

STDIO = ToolSpec.model_validate({"transport": "stdio", "command": "unused"})


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_provider_tools_sit_beside_the_builtins_and_a_broken_provider_is_left_out() -> None:
    made = LoopbackProviders(broken={"down"})
    providers = ToolProviders({}, made)
    connections = providers.for_tenant("acme", {"docs.v2": STDIO, "down": STDIO})
    toolbox = Toolbox(connections)
    specs = {spec.name: spec for spec in await toolbox.specs()}
    assert set(specs) == {*TOOLS, "docs_v2__upper", "docs_v2__add"}
    assert specs["docs_v2__upper"].description == "Upper-case a text."
    assert specs["docs_v2__upper"].parameters["properties"]["text"]["type"] == "string"
    assert await toolbox.run("docs_v2__upper", {"text": "hi"}) == ("HI", False)
    assert await toolbox.run("docs_v2__add", {"a": 1, "b": 2}) == ("3", False)
    text, is_error = await toolbox.run("down__upper", {"text": "hi"})
    assert is_error
    assert "no declared tool provider offers it" in text
    await providers.aclose()
    assert all(transport.closed for _, transport in made.made)


async def test_provider_errors_become_error_results() -> None:
    made = LoopbackProviders(
        answers={"upper": {"content": {"reason": "quota"}, "isError": True}, "add": {}}
    )
    toolbox = Toolbox(ToolProviders({}, made).for_tenant("acme", {"docs": STDIO}))
    await toolbox.specs()
    assert await toolbox.run("docs__upper", {"text": "x"}) == ('{"reason":"quota"}', True)
    text, is_error = await toolbox.run("docs__add", {"a": 1, "b": 2})  # the sidecar answers
    assert (text, is_error) == ("null", False)  # the scripted {} result: no content
    made.answers.pop("add")
    text, is_error = await toolbox.run("docs__add", {"a": "one", "b": 2})
    assert (text, is_error) == (
        "invalid arguments for tool 'docs__add' (it was not run): "
        "arguments.a: 'one' is not of type 'number'",
        True,
    ), "arguments that break the tool's schema never reach the provider"
    connection = ProviderConnection("acme", "docs", STDIO, {}, Clock(), made)
    text, is_error = await connection.call("add", {"a": "one", "b": 2})
    assert is_error
    assert text.startswith("tool 'add' of provider 'docs' failed: protocol_error, code -32602")
    assert await toolbox.run("docs__add", [1, 2]) == ("tool arguments must be a JSON object", True)


async def test_a_dead_connection_reconnects_on_a_later_use_after_a_backoff() -> None:
    made, clock = LoopbackProviders(), Clock()
    connection = ProviderConnection("acme", "docs", STDIO, {}, clock, made)
    assert await connection.call("upper", {"text": "a"}) == ("A", False)
    made.latest("docs").kill()
    text, is_error = await connection.call("upper", {"text": "b"})
    assert is_error
    assert "unavailable" in text
    assert len(made.made) == 1  # within the backoff: no reconnect yet, its tools are absent
    assert not await connection.ensure()
    assert connection.tools == ()
    clock.now += 1.0  # past the first backoff (at most 0.25 s)
    assert await connection.call("upper", {"text": "c"}) == ("C", False)
    assert len(made.made) == 2
    assert made.made[0][1].closed
    await connection.aclose()
    assert made.latest("docs").closed
    assert not await connection.ensure()  # closed for good: never connects again
    assert len(made.made) == 2


async def test_a_changed_declaration_replaces_the_connection() -> None:
    made = LoopbackProviders()
    providers = ToolProviders({}, made)
    (first,) = providers.for_tenant("acme", {"docs": STDIO})
    assert await first.ensure()
    (same,) = providers.for_tenant("acme", {"docs": STDIO})
    assert same is first
    changed = ToolSpec.model_validate({"transport": "stdio", "command": "other"})
    (second,) = providers.for_tenant("acme", {"docs": changed})
    assert second is not first
    assert providers.for_tenant("acme", {}) == []
    await providers.aclose()
    assert not await first.ensure()
    assert made.made[0][1].closed
