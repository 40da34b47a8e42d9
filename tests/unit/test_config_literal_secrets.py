"""Secrets outside env and headers (issue 26.7): a provider's args and url take references,
refuse secret-shaped literals with `literal_secret`, and are shown redacted."""

from __future__ import annotations

import sys
from typing import Any

import orjson
import pytest

from keel_stream.errors import InvalidConfig, LiteralSecret
from keel_stream.tenancy.document import (
    REDACTED,
    ToolSpec,
    parse_config,
    redacted,
    resolved_args,
    resolved_url,
)
from keel_stream.tenancy.secrets import secret_named

KEY = "sk-live-0123456789abcdefXYZ"
PASSWORD = "hunter2-correct-horse"


def _stdio(*args: str) -> dict[str, Any]:
    spec = {"transport": "stdio", "command": "t", "args": list(args)}
    return {"external": {"tools": {"t": spec}}}


def _http(url: str) -> dict[str, Any]:
    return {"external": {"tools": {"t": {"transport": "http", "url": url}}}}


# Each shape the attack run used, and its neighbours: (document, the literal it must not keep).
REFUSED: list[tuple[dict[str, Any], str]] = [
    (_stdio("--api-key", KEY), KEY),
    (_stdio("--api-key", "opaque-value-no-prefix"), "opaque-value-no-prefix"),
    (_stdio("--password", PASSWORD), PASSWORD),
    (_stdio(f"--token={PASSWORD}"), PASSWORD),
    (_stdio("--verbose", KEY), KEY),
    (_stdio("--header", "Authorization: Bearer abcdefgh12345"), "abcdefgh12345"),
    (_stdio("--endpoint", f"https://bob:{PASSWORD}@tools.example.com/mcp"), PASSWORD),
    (_http(f"https://bob:{PASSWORD}@tools.example.com/mcp"), PASSWORD),
    (_http(f"https://tools.example.com/mcp?api_key={PASSWORD}"), PASSWORD),
    (_http(f"https://tools.example.com/mcp?x=1&access_token={PASSWORD}"), PASSWORD),
    (_http(f"https://tools.example.com/mcp?sig={PASSWORD}"), PASSWORD),
    (_http(f"https://tools.example.com/mcp?q={KEY}"), KEY),
    (_http(f"https://tools.example.com/{KEY}/mcp"), KEY),
]


@pytest.mark.parametrize(("document", "literal"), REFUSED)
def test_a_secret_shaped_literal_in_args_or_a_url_is_refused_with_literal_secret(
    document: dict[str, Any], literal: str
) -> None:
    with pytest.raises(LiteralSecret) as caught:
        parse_config(document)
    assert caught.value.code == "literal_secret"
    assert isinstance(caught.value, InvalidConfig), "still an invalid document (400)"
    assert "external.tools.t." in caught.value.message
    assert literal not in caught.value.message


def test_references_in_args_and_url_are_accepted_and_kept_as_written() -> None:
    document = _stdio(
        "--api-key",
        "secret:TOOL_KEY",
        "--token=env:TOOL_TOKEN",
        "https://api.example.com/v1?key=${TOOL_KEY}",
    )
    assert parse_config(document).document() == document
    http = _http("https://tools.example.com/mcp?token=secret:DOCS_TOKEN&page=2")
    assert parse_config(http).document() == http


def test_plain_args_and_urls_are_not_taken_for_secrets() -> None:
    plain = _stdio(
        "-m",
        "keel_stream.gateway.sidecar_ref",
        "--key-file",
        "/etc/keel/tool.pem",
        "--token-limit",
        "4096",
        "--no-auth",
        "--auth",
        "none",
        "--model",
        "gpt-4o-mini",
        "--http",
        "0",
    )
    assert parse_config(plain).document() == plain
    http = _http("https://tools.example.com/mcp?keyspace=x&page=2&sort=name")
    assert parse_config(http).document() == http


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("--api-key", True),
        ("apiKey", True),
        ("X-Access-Token", True),
        ("client_secret", True),
        ("--password", True),
        ("sig", True),
        ("--key-file", False),
        ("--token-limit", False),
        ("--keyboard", False),
        ("--monkey", False),
        ("page", False),
    ],
)
def test_a_name_is_secret_when_a_word_of_it_says_so(name: str, secret: bool) -> None:
    assert secret_named(name) is secret


def test_a_stored_document_with_literals_is_read_and_shown_without_them() -> None:
    """A document stored before these checks still loads (the runtime keeps working) and every
    surface that shows it (API, CLI) goes through redacted()."""
    document: dict[str, Any] = _stdio(
        "--api-key", KEY, f"--password={PASSWORD}", "https://api.example.com/?token=abcdefgh99"
    )
    document["external"]["tools"]["docs"] = {
        "transport": "http",
        "url": f"https://bob:{PASSWORD}@tools.example.com/mcp?api_key={PASSWORD}&page=2",
    }
    config = parse_config(document, stored=True)
    shown = redacted(config)
    text = orjson.dumps(shown).decode()
    for literal in (KEY, PASSWORD, "abcdefgh99", "bob"):
        assert literal not in text, literal
    assert shown["external"]["tools"]["t"]["args"] == [
        "--api-key",
        REDACTED,
        f"--password={REDACTED}",
        "https://api.example.com/?token=[redacted]",
    ]
    assert shown["external"]["tools"]["docs"]["url"] == (
        "https://[redacted]@tools.example.com/mcp?api_key=[redacted]&page=2"
    )


def test_references_in_args_and_url_resolve_when_the_provider_starts() -> None:
    environ = {"KEEL_SECRET_TOOL_KEY": "k/1 &2", "TOOL_TOKEN": "t-2"}
    spec = ToolSpec.model_validate(
        {
            "transport": "stdio",
            "command": sys.executable,
            "args": [
                *("--api-key", "secret:TOOL_KEY", "--token=env:TOOL_TOKEN", "--x", "plain"),
                "https://h.example/?key=secret:TOOL_KEY&page=2",
            ],
        }
    )
    assert resolved_args(spec, environ, "external.tools.t") == [
        "--api-key",
        "k/1 &2",
        "--token=t-2",
        "--x",
        "plain",
        "https://h.example/?key=k%2F1%20%262&page=2",
    ]
    http = ToolSpec.model_validate(
        {"transport": "http", "url": "https://h.example/mcp?token=secret:TOOL_KEY"}
    )
    assert resolved_url(http, environ, "external.tools.d") == (
        "https://h.example/mcp?token=k%2F1%20%262"
    )
    with pytest.raises(InvalidConfig) as caught:
        resolved_args(spec, {}, "external.tools.t")
    assert "external.tools.t.args[1] (secret:TOOL_KEY: set KEEL_SECRET_TOOL_KEY)" in (
        caught.value.message
    )
