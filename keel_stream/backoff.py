"""Bounded exponential backoff with jitter."""

from __future__ import annotations

import random

__all__ = ["Backoff"]


class Backoff:
    """Delays that double from `initial` up to `maximum`; reset after a success."""

    def __init__(self, initial: float = 0.2, maximum: float = 5.0) -> None:
        self._initial = initial
        self._maximum = maximum
        self._next = initial

    def next_delay(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self._maximum)
        return delay * random.uniform(0.8, 1.0)  # noqa: S311 - jitter, not security

    def reset(self) -> None:
        self._next = self._initial
