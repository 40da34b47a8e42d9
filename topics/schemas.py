"""JSON Schemas of the record values, generated from the models and checked in under schemas/.

python -m keel_stream.topics.schemas          # rewrite topics/schemas/*.json from the models
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from keel_stream.topics.catalog import CATALOG, TopicSpec

__all__ = ["SCHEMA_DIR", "generated_schema", "schema_path", "write_schemas"]

SCHEMA_DIR = Path(__file__).parent / "schemas"


def generated_schema(spec: TopicSpec) -> dict[str, Any]:
    """The JSON Schema of a topic's record value, as the code's model defines it today."""
    schema = spec.value_model.model_json_schema(by_alias=True, mode="serialization")
    schema["$id"] = f"https://keel-stream.dev/schemas/{spec.name}.json"
    schema["description"] = f"{spec.name}: {spec.purpose}. Key: {spec.key}."
    return schema


def schema_path(spec: TopicSpec) -> Path:
    return SCHEMA_DIR / f"{spec.name}.json"


def render(spec: TopicSpec) -> str:
    return json.dumps(generated_schema(spec), indent=2, sort_keys=True) + "\n"


def write_schemas() -> list[Path]:
    SCHEMA_DIR.mkdir(exist_ok=True)
    written = []
    for spec in CATALOG:
        path = schema_path(spec)
        path.write_text(render(spec))
        written.append(path)
    return written


if __name__ == "__main__":
    for written_path in write_schemas():
        print(written_path)
