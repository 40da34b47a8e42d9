"""The tenant configuration document: one vocabulary, secret references only, a minimal env."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest

from keel_stream.errors import InvalidConfig
from keel_stream.settings import KeelSettings
from keel_stream.tenancy.document import (
    MINIMAL_ENV,
    REDACTED,
    TenantConfig,
    load_boot_config,
    load_config_file,
    minimal_env,
    parse_config,
    parse_reference,
    redact_env,
    redacted,
)

SEED: dict[str, Any] = {
    "external": {
        "backends": {
            "dsh": {
                "transport": "stdio",
                "command": "node",
                "args": ["/opt/keel/dsh-keel-sidecar.mjs"],
                "env": {
                    "DSH_PROVIDER": "env:DSH_PROVIDER",
                    "DSH_MODEL": "env:DSH_MODEL",
                    "DSH_API_KEY": "secret:DSH_API_KEY",
                },
                "timeoutMs": 60000,
                "maxSessions": 16,
            }
        },
        "tools": {
            "docs": {
                "transport": "http",
                "url": "https://tools.example.com/mcp",
                "headers": {"Authorization": "secret:DOCS_TOKEN"},
                "timeoutMs": 30000,
            }
        },
        "quota": {"unmetered": "deny", "maxSessionsPerBackend": 32},
    }
}

MODELS: dict[str, Any] = {
    "models": {
        "fast": {
            "provider": "openai",
            "model": "gpt-4o-mini",
            "systemPrompt": "Be brief.",
            "temperature": 0.2,
            "maxTokens": 512,
            "contextBudgetChars": 40000,
        },
        "deep": {"provider": "openai", "model": "o3"},
    },
    "defaultModel": "fast",
}


def _seed() -> dict[str, Any]:
    return copy.deepcopy(SEED)


def _refused(document: object) -> str:
    with pytest.raises(InvalidConfig) as caught:
        parse_config(document)
    assert caught.value.code == "invalid_config"
    return caught.value.message


def test_the_seed_example_loads(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(orjson.dumps(SEED))
    config = load_config_file(path)
    dsh = config.external.backends["dsh"]
    assert (dsh.transport, dsh.command, dsh.timeout_ms, dsh.max_sessions) == (
        "stdio",
        "node",
        60000,
        16,
    )
    assert config.external.tools["docs"].headers == {"Authorization": "secret:DOCS_TOKEN"}
    assert config.external.quota is not None
    assert config.external.quota.unmetered == "deny"
    assert config.external.quota.max_sessions_per_backend == 32
    assert config.external.agents_active
    assert config.external.tools_active
    assert config.document() == SEED, "the document round-trips in its own vocabulary"


def test_an_empty_document_turns_nothing_on() -> None:
    config = parse_config({})
    assert not config.external.agents_active
    assert not config.external.tools_active
    assert config.document() == {}


def test_the_model_settings_load_and_an_input_selects_one() -> None:
    config = parse_config({**_seed(), "settings": MODELS})
    fast = config.settings.models["fast"]
    assert (fast.system_prompt, fast.temperature, fast.max_tokens) == ("Be brief.", 0.2, 512)
    assert fast.context_budget_chars == 40000
    assert config.settings.model_for(None)[0] == "fast"
    assert config.settings.model_for({"model": "deep"})[1].model == "o3"
    with pytest.raises(InvalidConfig, match=r"selection\.model"):
        config.settings.model_for({"model": "nope"})


def test_the_default_model_must_be_declared() -> None:
    message = _refused({"settings": {**MODELS, "defaultModel": "other"}})
    assert "settings: defaultModel 'other'" in message


@pytest.mark.parametrize(
    "literal", ["sk-live-123", "Bearer xyz", "Bearer x", "env:lower", "${NAME", "secret:", ""]
)
def test_a_literal_header_is_refused_with_its_path(literal: str) -> None:
    document = _seed()
    document["external"]["tools"]["docs"]["headers"]["Authorization"] = literal
    message = _refused(document)
    assert message.startswith("external.tools.docs.headers.Authorization: not a secret reference")
    if literal.startswith(("sk-", "Bearer")):
        assert literal not in message, "the refused value is never echoed"


def test_a_literal_env_value_is_refused_with_its_path() -> None:
    document = _seed()
    document["external"]["backends"]["dsh"]["env"]["DSH_API_KEY"] = "hunter2"
    message = _refused(document)
    assert "external.backends.dsh.env.DSH_API_KEY: not a secret reference" in message
    assert "hunter2" not in message


@pytest.mark.parametrize("reference", ["${DSH_KEY}", "env:DSH_KEY", "secret:DSH_KEY", "env:_X1"])
def test_the_three_reference_forms_are_accepted(reference: str) -> None:
    document = _seed()
    document["external"]["backends"]["dsh"]["env"]["DSH_API_KEY"] = reference
    document["external"]["tools"]["docs"]["headers"]["Authorization"] = reference
    config = parse_config(document)
    assert config.external.backends["dsh"].env["DSH_API_KEY"] == reference
    parsed = parse_reference(reference)
    assert parsed is not None
    assert parsed.text == reference


def test_references_name_their_variables() -> None:
    braced, env, secret = (parse_reference(r) for r in ("${A}", "env:B", "secret:C"))
    assert braced is not None
    assert env is not None
    assert secret is not None
    assert (braced.variable, env.variable, secret.variable) == ("A", "B", "KEEL_SECRET_C")


@pytest.mark.parametrize(
    ("where", "field"),
    [
        ((), "services"),
        (("external",), "agents"),
        (("external", "backends", "dsh"), "timeout_ms"),
        (("external", "quota"), "unmeteredDefault"),
    ],
)
def test_extra_fields_are_refused(where: tuple[str, ...], field: str) -> None:
    document = _seed()
    target = document
    for key in where:
        target = target[key]
    target[field] = 1
    message = _refused(document)
    assert f"{'.'.join((*where, field))}: unknown field" in message


def test_values_are_not_coerced_and_transports_keep_their_fields() -> None:
    document = _seed()
    document["external"]["backends"]["dsh"]["timeoutMs"] = "60000"
    assert "external.backends.dsh.timeoutMs" in _refused(document)
    document = _seed()
    document["external"]["tools"]["docs"]["command"] = "node"
    assert "transport http takes url and headers" in _refused(document)
    document = _seed()
    del document["external"]["backends"]["dsh"]["command"]
    assert "transport stdio needs a command" in _refused(document)
    document = _seed()
    document["external"]["quota"]["unmetered"] = "maybe"
    assert "external.quota.unmetered" in _refused(document)
    assert "must be a JSON object" in _refused(["not", "an", "object"])


def test_a_stdio_provider_takes_a_budget_and_an_http_one_does_not() -> None:
    budget = {"cpuSeconds": 30, "addressSpaceMb": 2048, "openFiles": 256, "processes": 64}
    document = _seed()
    document["external"]["backends"]["dsh"]["budget"] = budget
    config = parse_config(document)
    dsh = config.external.backends["dsh"].budget
    assert dsh is not None
    assert (dsh.cpu_seconds, dsh.address_space_mb, dsh.open_files, dsh.processes) == (
        30,
        2048,
        256,
        64,
    )
    assert config.document() == document, "the budget round-trips in camelCase"
    assert config.external.tools["docs"].budget is None
    for wrong, path in [({"openFiles": 0}, "openFiles"), ({"memoryMb": 1}, "memoryMb")]:
        document["external"]["backends"]["dsh"]["budget"] = wrong
        assert f"external.backends.dsh.budget.{path}" in _refused(document)
    document = _seed()
    document["external"]["backends"]["dsh"]["budget"] = {"openFiles": "64"}
    assert "external.backends.dsh.budget.openFiles" in _refused(document), "no coercion"
    document = _seed()
    document["external"]["tools"]["docs"]["budget"] = {"openFiles": 64}
    message = _refused(document)
    assert "external.tools.docs: transport http takes no budget" in message


def test_minimal_env_is_the_allow_list_plus_the_declared_variables() -> None:
    environ = {
        "PATH": "/usr/bin",
        "HOME": "/home/keel",
        "LANG": "C.UTF-8",
        "KEEL_DATABASE_URL": "postgresql://secret@db/keel",
        "AWS_SECRET_ACCESS_KEY": "nope",
        "DSH_PROVIDER": "openai",
        "DSH_MODEL": "gpt",
        "KEEL_SECRET_DSH_API_KEY": "sk-123",
    }
    declared = _seed()["external"]["backends"]["dsh"]["env"]
    env = minimal_env(declared, environ)
    assert env == {
        "PATH": "/usr/bin",
        "HOME": "/home/keel",
        "LANG": "C.UTF-8",
        "DSH_PROVIDER": "openai",
        "DSH_MODEL": "gpt",
        "DSH_API_KEY": "sk-123",
    }
    assert set(env) <= set(MINIMAL_ENV) | set(declared)


def test_a_declared_variable_that_is_not_set_is_refused() -> None:
    declared = {"DSH_API_KEY": "secret:DSH_API_KEY", "DSH_MODEL": "${DSH_MODEL}"}
    with pytest.raises(InvalidConfig) as caught:
        minimal_env(declared, {"PATH": "/bin", "DSH_API_KEY": "x"}, "external.backends.dsh.env")
    message = caught.value.message
    assert "env.DSH_API_KEY (secret:DSH_API_KEY: set KEEL_SECRET_DSH_API_KEY)" in message
    assert "external.backends.dsh.env.DSH_MODEL (${DSH_MODEL}: set DSH_MODEL)" in message
    assert "'x'" not in message


def test_redacted_never_contains_a_resolved_value() -> None:
    config = parse_config({**_seed(), "settings": MODELS})
    environ = {"DSH_PROVIDER": "openai-value", "KEEL_SECRET_DOCS_TOKEN": "tok-999"}
    shown = redacted(config)
    text = orjson.dumps(shown).decode()
    assert "openai-value" not in text
    assert "tok-999" not in text
    assert shown["external"]["tools"]["docs"]["headers"] == {"Authorization": "secret:DOCS_TOKEN"}
    assert shown == config.document()
    resolved = _seed()
    resolved["external"]["backends"]["dsh"]["env"]["DSH_PROVIDER"] = environ["DSH_PROVIDER"]
    resolved["external"]["tools"]["docs"]["headers"]["Authorization"] = "Bearer tok-999"
    scrubbed = orjson.dumps(redacted(resolved)).decode()
    assert "openai-value" not in scrubbed
    assert "tok-999" not in scrubbed
    assert REDACTED in scrubbed


def test_the_audit_copy_of_an_environment_is_redacted() -> None:
    declared = {"DSH_API_KEY": "secret:DSH_API_KEY"}
    env = {"PATH": "/bin", "DSH_API_KEY": "sk-123", "STRAY": "value"}
    assert redact_env(env, declared) == {
        "PATH": "/bin",
        "DSH_API_KEY": "secret:DSH_API_KEY",
        "STRAY": REDACTED,
    }


def test_the_boot_document_is_the_external_config_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEEL_EXTERNAL_CONFIG", str(tmp_path / "boot.json"))
    assert KeelSettings().external_config == tmp_path / "boot.json"
    monkeypatch.setenv("KEEL_EXTERNAL_CONFIG", "  ")
    assert KeelSettings().external_config is None, "blank is unset, as it always was"


def test_the_boot_document_comes_from_keel_external_config(tmp_path: Path) -> None:
    assert load_boot_config(None) is None
    path = tmp_path / "boot.json"
    path.write_bytes(orjson.dumps(SEED))
    config = load_boot_config(path)
    assert isinstance(config, TenantConfig)
    assert config.document() == SEED


def test_a_file_that_is_missing_or_not_json_is_invalid_config(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfig, match="cannot read"):
        load_config_file(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidConfig, match="not JSON"):
        load_config_file(bad)
    literal = tmp_path / "literal.json"
    document = _seed()
    document["external"]["tools"]["docs"]["headers"]["Authorization"] = "Bearer abc"
    literal.write_bytes(orjson.dumps(document))
    with pytest.raises(InvalidConfig, match=r"headers\.Authorization") as caught:
        load_config_file(literal)
    assert str(literal) in caught.value.message
