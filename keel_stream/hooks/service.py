"""The hooks process (`keel-stream hooks run`): the dispatcher and the senders together, and
what the API holds to manage subscriptions."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from keel_stream.heartbeats import beating
from keel_stream.hooks.dispatcher import Dispatcher
from keel_stream.hooks.egress import (
    EgressPolicy,
    Resolver,
    TenantHosts,
    no_tenant_hosts,
    system_resolver,
)
from keel_stream.hooks.retry import RetryPolicy
from keel_stream.hooks.sender import Sender, SenderConfig
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.settings import KeelSettings
from keel_stream.store import open_store
from keel_stream.store.hooks import HookStore
from keel_stream.store.service_heartbeats import ServiceKind
from keel_stream.tenancy.document import TenantConfig
from keel_stream.topics.catalog import EVENTS
from keel_stream.worker.agent_settings import TenantConfigCache

__all__ = ["HookService", "HooksConfig", "group_name", "run_hooks", "tenant_hosts"]


def group_name(topic_prefix: str) -> str:
    """The dispatcher's consumer group."""
    return f"{topic_prefix}keel-hooks"


@dataclass(frozen=True, slots=True)
class HookService:
    """What the API's hook routes use: the store and where hooks may send (the operator's
    policy, narrowed per tenant by ``tenant_hosts``)."""

    store: HookStore
    policy: EgressPolicy
    resolver: Resolver = system_resolver
    tenant_hosts: TenantHosts = no_tenant_hosts

    async def policy_for(self, tenant: str) -> EgressPolicy:
        return self.policy.narrowed(await self.tenant_hosts(tenant))


def tenant_hosts(configs: TenantConfigCache) -> TenantHosts:
    """Each tenant's hooks.allowedHosts, from the document that applies to it (its own, else
    the boot document), read again within the cache's ttl of a change."""

    async def hosts(tenant: str) -> tuple[str, ...]:
        resolved = await configs.resolve(tenant)
        return () if resolved is None else tuple(resolved.config.hooks.allowed_hosts)

    return hosts


@dataclass(frozen=True)
class HooksConfig:
    database_url: str
    kafka: KafkaSettings | None
    topic_prefix: str = ""
    policy: EgressPolicy = field(default_factory=EgressPolicy)
    sender: SenderConfig = field(default_factory=SenderConfig)
    senders: int = 1
    """Sender loops in this process (each claims up to sender.concurrency rows)."""
    batch_size: int = 500
    heartbeat_s: float = 5.0
    """How often the process beats its row (the API's `hooks` capability;
    keel_stream.heartbeats)."""
    boot_config: TenantConfig | None = None
    """The runtime's boot document (KEEL_EXTERNAL_CONFIG): the hooks.allowedHosts of every
    tenant without a document of its own."""

    @classmethod
    def from_settings(
        cls,
        settings: KeelSettings,
        database_url: str,
        kafka: KafkaSettings | None,
        boot_config: TenantConfig | None = None,
    ) -> HooksConfig:
        return cls(
            boot_config=boot_config,
            database_url=database_url,
            kafka=kafka,
            topic_prefix=settings.topic_prefix,
            policy=EgressPolicy.parse(settings.hooks_allowed_hosts),
            sender=SenderConfig(
                timeout_s=settings.hooks_timeout_s,
                concurrency=settings.hooks_concurrency,
                poll_s=settings.hooks_poll_interval_s,
                retry=RetryPolicy(
                    base_s=settings.hooks_retry_base_s,
                    max_delay_s=settings.hooks_retry_max_delay_s,
                    max_attempts=settings.hooks_max_attempts,
                ),
            ),
            heartbeat_s=settings.service_heartbeat_interval_s,
        )


async def run_hooks(config: HooksConfig, stop: asyncio.Event) -> None:
    """Dispatch (with a broker) and send until stop is set. Without a broker only the senders
    run: deliveries come from replays and redeliveries then."""
    store = await open_store(config.database_url, max_size=4 + config.senders)
    wake = asyncio.Event()
    hosts = tenant_hosts(TenantConfigCache(store.tenant_configs(), config.boot_config))
    try:
        jobs = [
            Sender(
                store.hook_queue(), config.policy, config.sender, wake=wake, tenant_hosts=hosts
            ).run(stop)
            for _ in range(config.senders)
        ]
        if config.kafka is not None:
            dispatcher = Dispatcher(
                store.hook_dispatch(),
                config.kafka,
                EVENTS.full_name(config.topic_prefix),
                group_name(config.topic_prefix),
                batch_size=config.batch_size,
                wake=wake,
            )
            jobs.append(dispatcher.run(stop))
        heartbeats = store.service_heartbeats()
        async with (
            beating(heartbeats, ServiceKind.HOOKS_SENDER, config.heartbeat_s),
            asyncio.TaskGroup() as group,  # one failing stops the others
        ):
            for job in jobs:
                group.create_task(job)
    finally:
        await store.close()
