"""The platform's components configured from settings: `keel-stream dev` runs them together,
the other commands one each."""

from __future__ import annotations

import os

from keel_stream.api.app import ApiConfig
from keel_stream.gateway.config import load_boot_config
from keel_stream.relay import RelayConfig, Shard
from keel_stream.settings import KeelSettings
from keel_stream.worker.agent_settings import ModelProviders
from keel_stream.worker.providers import FakeProvider, OpenAIProvider, Provider
from keel_stream.worker.worker import WorkerConfig

__all__ = ["api_config", "provider", "relay_config", "worker_config"]


def relay_config(settings: KeelSettings, dsn: str, bootstrap: str, shard: Shard) -> RelayConfig:
    return RelayConfig(
        database_url=dsn,
        bootstrap=bootstrap,
        topic_prefix=settings.topic_prefix,
        shard=shard,
        batch_size=settings.relay_batch_size,
        poll_interval_s=settings.relay_poll_interval_s,
    )


def provider(settings: KeelSettings) -> Provider:
    """The workers' model provider (KEEL_PROVIDER)."""
    if settings.provider == "openai":
        return OpenAIProvider(
            settings.openai_base_url, settings.openai_api_key, settings.openai_model
        )
    return FakeProvider()


def worker_config(settings: KeelSettings, dsn: str, bootstrap: str | None) -> WorkerConfig:
    """InvalidConfig when KEEL_EXTERNAL_CONFIG names a file that is not a valid document."""
    return WorkerConfig(
        database_url=dsn,
        bootstrap=bootstrap,
        topic_prefix=settings.topic_prefix,
        slots=settings.worker_slots,
        tenant_slots=settings.worker_tenant_slots,
        tenant_max_running=settings.tenant_max_running,
        lease_ttl_s=settings.worker_lease_ttl_s,
        drain_grace_s=settings.worker_drain_grace_s,
        max_turns=settings.worker_max_turns,
        context_budget_chars=settings.worker_context_budget_chars,
        provider=provider(settings),
        boot_config=load_boot_config(os.environ),
        model_providers=ModelProviders(settings.openai_base_url, settings.openai_api_key),
    )


def api_config(settings: KeelSettings, dsn: str, bootstrap: str | None) -> ApiConfig:
    return ApiConfig(database_url=dsn, bootstrap=bootstrap, topic_prefix=settings.topic_prefix)
