"""What a Faust app takes from the Kafka door: its broker settings (from the one KafkaSettings)
and its aiokafka transport, with a consumer that resumes from offsets stored elsewhere.

The app itself (agents, timers, the worker) is its owner's (keel_stream.projector.host); only
how it reaches the brokers is decided here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import faust
from faust.transport.drivers.aiokafka import Consumer as AIOKafkaFaustConsumer
from faust.transport.drivers.aiokafka import Transport as AIOKafkaTransport

from keel_stream.kafka.clients import ssl_context
from keel_stream.kafka.settings import KafkaSettings

__all__ = ["faust_broker", "stored_offset_transport"]


def _credentials(kafka: KafkaSettings) -> faust.types.auth.CredentialsT | None:
    context = ssl_context(kafka) if kafka.tls else None
    if kafka.sasl:
        return faust.SASLCredentials(
            username=kafka.sasl_username,
            password=kafka.sasl_password,
            ssl_context=context,
            mechanism=kafka.sasl_mechanism,
        )
    return faust.SSLCredentials(context) if context is not None else None


def faust_broker(kafka: KafkaSettings, role: str, *, rebalance_timeout_s: float) -> dict[str, Any]:
    """The broker settings of a Faust app (keyword arguments of faust.App) for `role`.

    A JoinGroup request may wait the whole rebalance timeout for the other members, so requests
    may take that long and 5 s more (what the Java client allows a JoinGroup)."""
    return {
        "broker": [f"kafka://{host.strip()}" for host in kafka.bootstrap.split(",")],
        "broker_client_id": f"{kafka.client_id}-{role}",
        "broker_credentials": _credentials(kafka),
        "broker_session_timeout": kafka.session_timeout_s,
        "broker_heartbeat_interval": max(0.1, kafka.session_timeout_s / 10),
        "broker_rebalance_timeout": rebalance_timeout_s,
        "broker_request_timeout": max(
            kafka.request_timeout_s, kafka.session_timeout_s, rebalance_timeout_s + 5
        ),
    }


def stored_offset_transport(
    app: faust.App,
    topic: str,
    stored: Callable[[], Awaitable[dict[int, int]]],
    resumed: Callable[[dict[int, int], set[int]], None],
) -> AIOKafkaTransport:
    """Faust's aiokafka transport with a consumer that, after every assignment, seeks each
    assigned partition of `topic` to the offset `stored` gives (0 when it has none), then tells
    `resumed` the offsets and the partitions assigned.

    `perform_seek` is where Faust seeks after an assignment, right before the flow resumes;
    seeking in `on_partitions_assigned` instead races Faust's own seek. It is internal to
    faust-streaming, which is pinned; a crash-restart test asserts nothing is applied twice."""

    class StoredOffsetConsumer(AIOKafkaFaustConsumer):
        async def perform_seek(self) -> None:
            await super().perform_seek()
            offsets = await stored()
            assigned = {tp.partition for tp in self.assignment() if tp.topic == topic}
            for tp in self.assignment():
                if tp.topic == topic:
                    await self.seek(tp, offsets.get(tp.partition, 0))
            resumed(offsets, assigned)

    class StoredOffsetTransport(AIOKafkaTransport):
        Consumer = StoredOffsetConsumer

    return StoredOffsetTransport(app.conf.broker_consumer, app)
