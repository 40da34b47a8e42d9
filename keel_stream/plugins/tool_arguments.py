"""A tool call's arguments checked before the tool runs: a JSON object, every number in it
finite, and valid against the tool's JSON Schema (its ``parameters``).

JSON Schema alone does not refuse NaN or ±Infinity (Python's JSON reads them, and NaN passes
``"type": "number"``), so non-finite numbers are refused first. A refusal is a message for the
model, naming where the problem is, so that it can correct the call.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped]
from jsonschema.validators import validator_for  # type: ignore[import-untyped]

__all__ = ["ArgumentsCheck", "SchemaError", "non_finite"]

_SHOWN: Final = 3
"""Problems listed in one refusal; the rest are counted."""


def _where(path: Sequence[Any]) -> str:
    where = "arguments"
    for part in path:
        where += f"[{part}]" if isinstance(part, int) else f".{part}"
    return where


def non_finite(arguments: Any) -> str | None:
    """Where the first NaN or ±Infinity in a JSON value is (``arguments.a[0]``), else None."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(arguments, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            return f"{_where(path)} is {value}, not a finite number"
        if isinstance(value, Mapping):
            stack.extend((v, (*path, k)) for k, v in value.items())
        elif isinstance(value, list | tuple):
            stack.extend((v, (*path, i)) for i, v in enumerate(value))
    return None


class ArgumentsCheck:
    """The check of one tool's arguments. SchemaError when ``schema`` is not a JSON Schema."""

    def __init__(self, schema: Mapping[str, Any] | None) -> None:
        self._validator: Any = None
        if schema:
            cls = validator_for(schema, default=Draft202012Validator)
            cls.check_schema(schema)
            self._validator = cls(schema)

    def problem(self, tool: str, arguments: Any) -> str | None:
        """Why the tool must not run with these arguments; None when they are fine."""
        if not isinstance(arguments, Mapping):
            return "tool arguments must be a JSON object"
        refused = f"invalid arguments for tool {tool!r} (it was not run): "
        where = non_finite(arguments)
        if where is not None:
            return refused + where
        if self._validator is None:
            return None
        try:
            errors = list(self._validator.iter_errors(arguments))
        except Exception:  # noqa: BLE001 - e.g. an unresolvable $ref: the tool itself decides
            return None
        if not errors:
            return None
        errors.sort(key=lambda e: [str(part) for part in e.path])
        shown = [f"{_where(e.absolute_path)}: {e.message}" for e in errors[:_SHOWN]]
        more = len(errors) - len(shown)
        return refused + "; ".join(shown) + (f" (and {more} more)" if more else "")
