"""docs/examples/external-config.json, the example docs/external.md shows, is a valid document."""

from __future__ import annotations

from pathlib import Path

from keel_stream.tenancy.document import load_config_file, parse_reference, redacted

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "external-config.json"


def test_the_documented_example_configuration_loads() -> None:
    config = load_config_file(EXAMPLE)
    assert config.external.agents_active
    assert config.external.tools_active
    assert config.settings.model_for({"model": "fast"})[1].max_tokens == 1024


def test_the_example_holds_secret_references_only() -> None:
    config = load_config_file(EXAMPLE)
    providers = [*config.external.backends.values(), *config.external.tools.values()]
    values = [v for p in providers for v in (*p.env.values(), *p.headers.values())]
    assert values
    assert all(parse_reference(value) is not None for value in values)
    assert redacted(config) == config.document()


def test_the_example_is_shown_in_the_docs() -> None:
    text = (EXAMPLE.parents[1] / "external.md").read_text()
    assert "examples/external-config.json" in text
