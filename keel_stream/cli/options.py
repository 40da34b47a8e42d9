"""What commands share: options bound to their KEEL_* variables, the settings they make, and
closed sets checked while the command line is parsed."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from keel_stream.dev.addresses import running_dev
from keel_stream.errors import (
    InvalidSetting,
    KeelError,
    MissingDatabaseUrl,
    UnknownKind,
    UnknownProjection,
)
from keel_stream.kafka.settings import CLIENT_LOGGER, KafkaSettings, kafka_settings
from keel_stream.kernel import Kind
from keel_stream.logs import configure_logging
from keel_stream.projections import ALL
from keel_stream.settings import KeelSettings, env_var

__all__ = [
    "KINDS",
    "PROJECTIONS",
    "ApiHost",
    "ApiPort",
    "Bootstrap",
    "ClosedSet",
    "DataDir",
    "DatabaseUrl",
    "MetricsHost",
    "MetricsPort",
    "RelayShards",
    "load_settings",
    "optional_kafka",
    "require_database",
    "require_kafka",
]


def _default(field: str) -> str:
    return str(KeelSettings.model_fields[field].default)


DatabaseUrl = Annotated[
    str | None,
    typer.Option("--database-url", envvar=env_var("database_url"), help="PostgreSQL URL."),
]
Bootstrap = Annotated[
    str | None,
    typer.Option("--bootstrap", envvar=env_var("kafka_bootstrap"), help="Kafka bootstrap servers."),
]
DataDir = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        envvar=env_var("data_dir"),
        help="Data directory of the embedded servers.",
        show_default=_default("data_dir"),
    ),
]
ApiHost = Annotated[
    str | None,
    typer.Option(
        "--host",
        envvar=env_var("api_host"),
        help="Interface the API listens on.",
        show_default=_default("api_host"),
    ),
]
ApiPort = Annotated[
    int | None,
    typer.Option(
        "--port",
        envvar=env_var("api_port"),
        help="Port the API listens on (0: any free one).",
        show_default=_default("api_port"),
    ),
]
RelayShards = Annotated[
    int | None,
    typer.Option(
        "--shards",
        envvar=env_var("relay_shards"),
        help="Outbox shard count.",
        show_default=_default("relay_shards"),
    ),
]
MetricsHost = Annotated[
    str | None,
    typer.Option(
        "--metrics-host",
        envvar=env_var("metrics_host"),
        help="Interface for --metrics-port (0.0.0.0 in a container).",
        show_default=_default("metrics_host"),
    ),
]
MetricsPort = Annotated[
    int | None,
    typer.Option(
        "--metrics-port",
        envvar=env_var("metrics_port"),
        help="Serve Prometheus /metrics on 127.0.0.1:PORT.",
    ),
]


def _describe(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"])
        problems.append(f"{env_var(field)}: {error['msg']} (got {error.get('input')!r})")
    return "; ".join(problems)


def load_settings(*, use_running_dev: bool = True, **flags: Any) -> KeelSettings:
    """The KEEL_* settings with the flags given on the command line (None: not given) on top;
    logging is configured from them.

    A database or broker that neither gives is taken from the `keel-stream dev` running on the
    data directory (its <data_dir>/dev.json), unless use_running_dev is False."""
    given = {name: value for name, value in flags.items() if value is not None}
    try:
        settings = KeelSettings(**given)
    except ValidationError as exc:
        raise InvalidSetting(_describe(exc)) from None
    if use_running_dev:
        settings = _with_running_dev(settings)
    configure_logging(settings.log_level, settings.log_format, settings.no_color)
    # The Kafka client logs through the standard library with no handler of its own; Python's
    # last-resort handler would print its records as raw lines beside the command's own report
    # (the Kafka seam puts the same cause into the error). Configured handlers still get them.
    logging.getLogger(CLIENT_LOGGER).addHandler(logging.NullHandler())
    return settings


def _with_running_dev(settings: KeelSettings) -> KeelSettings:
    """Fill in the database and broker a running dev chose, where nothing else gave them."""
    if settings.database_url is not None and settings.kafka_bootstrap is not None:
        return settings
    dev = running_dev(settings.data_dir)
    if dev is None:
        return settings
    return settings.model_copy(
        update={
            "database_url": settings.database_url or dev.database_url,
            "kafka_bootstrap": settings.kafka_bootstrap or dev.kafka_bootstrap,
        }
    )


def require_database(settings: KeelSettings) -> str:
    if not settings.database_url:
        raise MissingDatabaseUrl(
            f"set {env_var('database_url')} or --database-url (or start `keel-stream dev`)"
        )
    return settings.database_url


def require_kafka(settings: KeelSettings) -> KafkaSettings:
    """The command's Kafka settings; MissingKafkaBootstrap without a broker."""
    return kafka_settings(settings)


def optional_kafka(settings: KeelSettings) -> KafkaSettings | None:
    """The command's Kafka settings, None when it is to run without a broker."""
    return kafka_settings(settings) if settings.kafka_bootstrap else None


@dataclass(frozen=True)
class ClosedSet:
    """Names a parameter must be one of: listed in the help, checked while the command line is
    parsed, and a name outside the set is the error tree's own error (its code, exit 1)."""

    names: tuple[str, ...]
    error: Callable[[str], KeelError]
    what: str

    @property
    def metavar(self) -> str:
        return "|".join(self.names)

    @property
    def listed(self) -> str:
        return ", ".join(self.names)

    def _check(self, name: str) -> str:
        if name not in self.names:
            raise self.error(f"no {self.what} named {name!r} (one of: {self.listed})")
        return name

    def one(self, value: str | None) -> str | None:
        """Callback of a parameter taking one name."""
        return None if value is None else self._check(value)

    def many(self, values: Sequence[str] | None) -> list[str]:
        """Callback of a repeatable parameter."""
        return [self._check(value) for value in values or ()]


PROJECTIONS = ClosedSet(tuple(p.name for p in ALL), UnknownProjection, "read model")
KINDS = ClosedSet(tuple(kind.value for kind in Kind), UnknownKind, "kind")
