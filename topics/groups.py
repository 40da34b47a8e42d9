"""The consumer groups the platform's daemons join on the broker.

The API's readiness and dev's "ready" both ask whether the projections worker's group is live,
so its name is here, below all three, not in any one of them (the projector's
HostConfig.group spells the same name; tests/unit/test_dev_parts.py holds the two equal).
"""

from __future__ import annotations

from typing import Final

__all__ = ["PROJECTOR_GROUP", "projector_group"]

PROJECTOR_GROUP: Final = "keel-projections"
"""The projections worker's consumer group, after the topic prefix."""


def projector_group(prefix: str) -> str:
    """The projections worker's consumer group under ``prefix``."""
    return f"{prefix}{PROJECTOR_GROUP}"
