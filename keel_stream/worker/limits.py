"""How long a tool call and a model request may take (KEEL_TOOL_TIMEOUT_S,
KEEL_PROVIDER_STALL_TIMEOUT_S, KEEL_PROVIDER_REQUEST_TIMEOUT_S).

A component given no limits reads them from the KEEL_* environment when it is made, the same
environment the command validated at its start (read once per distinct value: reading the whole
settings takes milliseconds, and a toolbox is made per attempt).
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from typing import Final

from keel_stream.settings import KeelSettings, env_var

__all__ = ["StreamLimits", "ToolLimits"]

_FIELDS: Final = ("tool_timeout_s", "provider_stall_timeout_s", "provider_request_timeout_s")


def _configured() -> tuple[float, ...]:
    return _read(tuple(os.environ.get(env_var(name)) for name in _FIELDS))


@functools.lru_cache(maxsize=8)
def _read(raw: tuple[str | None, ...]) -> tuple[float, ...]:
    """The three settings, validated; ``raw`` (their variables' values) is the cache key."""
    settings = KeelSettings()
    return tuple(float(getattr(settings, name)) for name in _FIELDS)


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
    def from_environment(cls) -> ToolLimits:
        return cls(_configured()[0])


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
    def from_environment(cls) -> StreamLimits:
        _, stall_s, total_s = _configured()
        return cls(stall_s, total_s)
