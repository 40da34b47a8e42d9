"""When dev may say "ready": once the API answers /healthz and the projections worker's consumer
group is live.

Until the worker has joined its group and been assigned the source partitions, a commit is in
the ledger and on the topic but no read model applies it; a client that reads with min_seq right
after "ready" would wait for nothing. The group is live when the broker reports it Stable with a
member: from then on the worker reads every partition from the offsets stored with its states,
so a commit made after that is applied within a fetch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from enum import StrEnum
from typing import Any, Final

import httpx

from keel_stream.errors import BrokerError
from keel_stream.kafka.incarnation import group_live
from keel_stream.kafka.settings import KafkaSettings

__all__ = [
    "Readiness",
    "wait_api_answers",
    "wait_projector_live",
]

_POLL_S: Final = 0.2


class Readiness(StrEnum):
    LIVE = "live"
    ENDED = "ended"
    """Something it waited with ended first (the worker exited, a stop was asked for)."""
    TIMED_OUT = "timed out"


async def _poll(kafka: KafkaSettings, group: str) -> None:
    while True:
        try:
            if await group_live(kafka, group):
                return
        except BrokerError:
            pass  # not answering yet: ask again
        await asyncio.sleep(_POLL_S)


async def _answers(url: str) -> None:
    async with httpx.AsyncClient(timeout=2.0) as client:
        while True:
            try:
                if (await client.get(f"{url}/healthz")).status_code == httpx.codes.OK:
                    return
            except httpx.HTTPError:
                pass  # not listening yet: ask again
            await asyncio.sleep(_POLL_S / 2)


async def _until(
    condition: Coroutine[Any, Any, None], unless: Sequence[asyncio.Future[Any]], timeout_s: float
) -> Readiness:
    met = asyncio.ensure_future(condition)
    try:
        done, _ = await asyncio.wait(
            [met, *unless], timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        met.cancel()
    if met in done:
        return Readiness.LIVE
    return Readiness.ENDED if done else Readiness.TIMED_OUT


async def wait_projector_live(
    kafka: KafkaSettings, group: str, unless: Sequence[asyncio.Future[Any]], timeout_s: float
) -> Readiness:
    """Wait until the group is live, any of `unless` is done (they are not cancelled here), or
    timeout_s passes."""
    return await _until(_poll(kafka, group), unless, timeout_s)


async def wait_api_answers(
    url: str, unless: Sequence[asyncio.Future[Any]], timeout_s: float
) -> Readiness:
    """Wait until the API at url answers GET /healthz with 200, any of `unless` is done, or
    timeout_s passes."""
    return await _until(_answers(url), unless, timeout_s)
