"""How long a tool call and a model request may take (KEEL_TOOL_TIMEOUT_S,
KEEL_PROVIDER_STALL_TIMEOUT_S, KEEL_PROVIDER_REQUEST_TIMEOUT_S).

The command builds them from its settings at its edge (`from_settings`) and passes them in; a
component given none uses the defaults, never the environment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from keel_stream.settings import KeelSettings

__all__ = ["StreamLimits", "ToolLimits"]


def _check(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number of seconds above 0, not {value!r}")


@dataclass(frozen=True, slots=True)
class ToolLimits:
    timeout_s: float = 60.0
    """A tool call that takes longer ends as an isError result."""

    def __post_init__(self) -> None:
        _check("timeout_s", self.timeout_s)

    @classmethod
    def from_settings(cls, settings: KeelSettings) -> ToolLimits:
        return cls(settings.tool_timeout_s)


@dataclass(frozen=True, slots=True)
class StreamLimits:
    stall_s: float = 60.0
    """A model stream that sends nothing for this long is cut."""
    total_s: float = 600.0
    """The longest one model request may take, its retries included."""

    def __post_init__(self) -> None:
        _check("stall_s", self.stall_s)
        _check("total_s", self.total_s)

    @classmethod
    def from_settings(cls, settings: KeelSettings) -> StreamLimits:
        return cls(settings.provider_stall_timeout_s, settings.provider_request_timeout_s)
