"""The reference ToolProvider's two tools: ``upper`` and ``add``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from keel_stream.gateway.protocol import ToolSpec

__all__ = ["TOOLS", "run_tool"]


class _UpperArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str


class _AddArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    a: float
    b: float


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="upper",
        description="Upper-case a text.",
        input_schema=_UpperArgs.model_json_schema(),
    ),
    ToolSpec(name="add", description="Add two numbers.", input_schema=_AddArgs.model_json_schema()),
)


def run_tool(name: str, arguments: dict[str, Any]) -> Any:
    """Run a tool; pydantic's ValidationError for bad arguments (the caller answers -32602)."""
    if name == "upper":
        return _UpperArgs.model_validate(arguments).text.upper()
    args = _AddArgs.model_validate(arguments)
    total = args.a + args.b
    return int(total) if total.is_integer() else total
