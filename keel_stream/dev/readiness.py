"""When dev may say "ready": once the projections worker's consumer group is live.

Until the worker has joined its group and been assigned the source partitions, a commit is in
the ledger and on the topic but no read model applies it; a client that reads with min_seq right
after "ready" would wait for nothing. The group is live when the broker reports it Stable with a
member: from then on the worker reads every partition from the offsets stored with its states,
so a commit made after that is applied within a fetch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Final

from keel_stream.errors import BrokerError
from keel_stream.kafka.incarnation import group_live

__all__ = ["PROJECTOR_GROUP", "Readiness", "projector_group", "wait_projector_live"]

PROJECTOR_GROUP: Final = "keel-projections"
"""The worker's consumer group (keel_stream.projector.host.HostConfig.group), after the prefix."""
_POLL_S: Final = 0.2


class Readiness(StrEnum):
    LIVE = "live"
    ENDED = "ended"
    """Something it waited with ended first (the worker exited, a stop was asked for)."""
    TIMED_OUT = "timed out"


def projector_group(prefix: str) -> str:
    return f"{prefix}{PROJECTOR_GROUP}"


async def _poll(bootstrap: str, group: str) -> None:
    while True:
        try:
            if await group_live(bootstrap, group):
                return
        except BrokerError:
            pass  # not answering yet: ask again
        await asyncio.sleep(_POLL_S)


async def wait_projector_live(
    bootstrap: str, group: str, unless: Sequence[asyncio.Future[Any]], timeout_s: float
) -> Readiness:
    """Wait until the group is live, any of `unless` is done (they are not cancelled here), or
    timeout_s passes."""
    live = asyncio.ensure_future(_poll(bootstrap, group))
    try:
        done, _ = await asyncio.wait(
            [live, *unless], timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        live.cancel()
    if live in done:
        return Readiness.LIVE
    return Readiness.ENDED if done else Readiness.TIMED_OUT
