"""The checked-in JSON Schemas are what the code's models generate."""

from __future__ import annotations

import json

import pytest

from keel_stream.topics.catalog import CATALOG, TopicSpec
from keel_stream.topics.schemas import generated_schema, schema_path


@pytest.mark.parametrize("spec", CATALOG, ids=lambda s: s.name)
def test_checked_in_schema_matches_the_model(spec: TopicSpec) -> None:
    checked_in = json.loads(schema_path(spec).read_text())
    assert checked_in == generated_schema(spec), (
        f"{schema_path(spec).name} drifted from its model: "
        "run `python -m keel_stream.topics.schemas`"
    )


def test_every_topic_is_keyed_by_session_and_versioned() -> None:
    for spec in CATALOG:
        assert spec.key == "tenant/session"
        assert spec.name.endswith(".v1")


def test_event_schema_requires_the_dedupe_triple() -> None:
    (events,) = [s for s in CATALOG if s.name == "keel.events.v1"]
    schema = generated_schema(events)
    assert {"tenant", "session", "seq", "kind", "payload", "committedAt"} <= set(schema["required"])
    assert schema.get("additionalProperties", True) is not False, "v1 records only grow"
