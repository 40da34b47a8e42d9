"""Delivery of user input: queue (the default) or guide, and the degrade of guide to queue."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

__all__ = ["Delivery", "effective_delivery", "with_effective_delivery"]


class Delivery(StrEnum):
    """When an input enters the model context."""

    QUEUE = "queue"
    """After the current run ends, at the next claim. An absent field means queue."""
    GUIDE = "guide"
    """Inside the current turn, at the next request boundary after sibling tool results."""


def effective_delivery(requested: Delivery | None, attempt_active: bool) -> Delivery:
    """Guide needs an active attempt to be injected into; without one it degrades to queue."""
    if requested is Delivery.GUIDE and attempt_active:
        return Delivery.GUIDE
    return Delivery.QUEUE


def with_effective_delivery(payload: Mapping[str, Any], attempt_active: bool) -> dict[str, Any]:
    """The payload as it is written: a degraded guide is recorded as queue.

    An absent delivery stays absent (old clients and dumps mean queue by it), so only a guide
    that could not be honoured is rewritten, and the client sees what actually happened.
    """
    written = dict(payload)
    if written.get("delivery") == Delivery.GUIDE and not attempt_active:
        written["delivery"] = Delivery.QUEUE.value
    return written
