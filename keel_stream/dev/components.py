"""The platform's components configured from settings: the single-component commands run one
each, and `keel-stream dev` runs each of those commands as a child with the environment it
resolved (`child_environment`)."""

from __future__ import annotations

import socket
from collections.abc import Mapping

from keel_stream.api.app import ApiConfig
from keel_stream.api.limits import ApiLimits
from keel_stream.api.tenant_limits import TenantLimits
from keel_stream.errors import InvalidSetting
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.relay import RelayConfig, Shard
from keel_stream.settings import KeelSettings, env_var
from keel_stream.tenancy.document import load_boot_config
from keel_stream.worker.agent_settings import ModelProviders
from keel_stream.worker.limits import StreamLimits, ToolLimits
from keel_stream.worker.providers import FakeProvider, OpenAIProvider, Provider
from keel_stream.worker.tools import BuiltinContext
from keel_stream.worker.worker import WorkerConfig

__all__ = [
    "METRICS_OFFSETS",
    "api_config",
    "child_environment",
    "free_port",
    "metrics_ports",
    "provider",
    "relay_config",
    "worker_config",
]

METRICS_OFFSETS: Mapping[str, int] = {
    "projector": 0,
    "relay": 1,
    "worker": 2,
    "hooks": 3,
    "triggers": 4,
}
"""With KEEL_METRICS_PORT=P, dev's projections worker serves its metrics on P, its relay on P+1,
its agent worker on P+2, its hooks process on P+3 and its trigger scheduler on P+4 (the API
serves its own on /metrics)."""
_NOT_PASSED = frozenset({"dev_api_key", "dev_kafka", "metrics_port", "no_color"})
"""Settings only dev reads (the metrics port is given to each child on its own; NO_COLOR, not
a KEEL_* variable, passes through as it is)."""


def relay_config(
    settings: KeelSettings, dsn: str, kafka: KafkaSettings, shard: Shard
) -> RelayConfig:
    return RelayConfig(
        database_url=dsn,
        kafka=kafka,
        topic_prefix=settings.topic_prefix,
        shard=shard,
        batch_size=settings.relay_batch_size,
        poll_interval_s=settings.relay_poll_interval_s,
    )


def provider(settings: KeelSettings) -> Provider:
    """The workers' model provider (KEEL_PROVIDER)."""
    limits = StreamLimits.from_settings(settings)
    if settings.provider == "openai":
        return OpenAIProvider(
            settings.openai_base_url, settings.openai_api_key, settings.openai_model, limits=limits
        )
    return FakeProvider(limits=limits)


def worker_config(
    settings: KeelSettings, dsn: str, kafka: KafkaSettings | None, environ: Mapping[str, str]
) -> WorkerConfig:
    """InvalidConfig when KEEL_EXTERNAL_CONFIG names a file that is not a valid document."""
    return WorkerConfig(
        database_url=dsn,
        kafka=kafka,
        topic_prefix=settings.topic_prefix,
        slots=settings.worker_slots,
        tenant_slots=settings.worker_tenant_slots,
        tenant_max_running=settings.tenant_max_running,
        lease_ttl_s=settings.worker_lease_ttl_s,
        drain_grace_s=settings.worker_drain_grace_s,
        max_turns=settings.worker_max_turns,
        context_budget_chars=settings.worker_context_budget_chars,
        provider=provider(settings),
        boot_config=load_boot_config(settings.external_config),
        model_providers=ModelProviders(
            settings.openai_base_url,
            settings.openai_api_key,
            StreamLimits.from_settings(settings),
        ),
        rpc_max_line_bytes=settings.rpc_max_line_bytes,
        tool_limits=ToolLimits.from_settings(settings),
        builtins=BuiltinContext(settings.tool_notes_file),
        environ=environ,
    )


def api_config(
    settings: KeelSettings, dsn: str, kafka: KafkaSettings | None, environ: Mapping[str, str]
) -> ApiConfig:
    """InvalidConfig when KEEL_EXTERNAL_CONFIG names a file that is not a valid document."""
    return ApiConfig(
        database_url=dsn,
        kafka=kafka,
        topic_prefix=settings.topic_prefix,
        boot_config=load_boot_config(settings.external_config),
        data_dir=settings.data_dir,
        rpc_max_line_bytes=settings.rpc_max_line_bytes,
        limits=ApiLimits.from_settings(settings),
        tenant_limits=TenantLimits.from_settings(settings),
        settings=settings,
        environ=environ,
    )


def metrics_ports(settings: KeelSettings) -> dict[str, int]:
    """The metrics port of each of dev's children that serves one (none without
    KEEL_METRICS_PORT); InvalidSetting when the last one is past 65535."""
    base = settings.metrics_port
    if base is None:
        return {}
    ports = {name: base + offset for name, offset in METRICS_OFFSETS.items()}
    if max(ports.values()) > 65535:
        raise InvalidSetting(
            f"{env_var('metrics_port')}: dev serves metrics on it and the "
            f"{len(ports) - 1} ports after it; choose one below {65536 - len(ports) + 1}"
        )
    return ports


def child_environment(
    settings: KeelSettings,
    dsn: str,
    bootstrap: str,
    api_port: int,
    environ: Mapping[str, str],
) -> dict[str, str]:
    """The whole environment of a child command: dev's own, with the KEEL_* settings replaced by
    those dev resolved (its flags, the servers it started, the API port it chose); other
    variables (KEEL_EXTERNAL_CONFIG, ...) pass through. No metrics port (metrics_ports)."""
    fields = {env_var(name) for name in KeelSettings.model_fields}
    env = {name: value for name, value in environ.items() if name.upper() not in fields}
    env.update(
        {
            env_var(name): str(value)
            for name in KeelSettings.model_fields
            if name not in _NOT_PASSED and (value := getattr(settings, name)) is not None
        }
    )
    env.update(
        {
            env_var("database_url"): dsn,
            env_var("kafka_bootstrap"): bootstrap,
            env_var("data_dir"): str(settings.data_dir.resolve()),
            env_var("api_port"): str(api_port),
            env_var("relay_shards"): "1",  # dev runs one relay, for every shard
        }
    )
    return env


def free_port(host: str) -> int:
    """A port nothing listens on now, on host's interface (for a configured port of 0)."""
    family, kind, proto, _, address = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0]
    with socket.socket(family, kind, proto) as probe:
        probe.bind(address)
        port: int = probe.getsockname()[1]
        return port
