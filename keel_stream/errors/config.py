"""A process that cannot start as configured (the CLI's exit status 2)."""

from __future__ import annotations

from keel_stream.errors.base import KeelError

__all__ = [
    "ConfigurationError",
    "DevAlreadyRunning",
    "InvalidSetting",
    "MissingDatabaseUrl",
    "MissingKafkaBootstrap",
    "PortInUse",
]


class ConfigurationError(KeelError):
    """A process cannot start as configured; nothing was started."""

    code = "configuration_error"


class InvalidSetting(ConfigurationError):
    """A KEEL_* variable (or the flag standing in for it) does not parse or is out of range."""

    code = "invalid_setting"


class MissingDatabaseUrl(ConfigurationError):
    """The command needs PostgreSQL: neither --database-url nor KEEL_DATABASE_URL is set."""

    code = "missing_database_url"


class MissingKafkaBootstrap(ConfigurationError):
    """The command needs a broker: neither --bootstrap nor KEEL_KAFKA_BOOTSTRAP is set."""

    code = "missing_kafka_bootstrap"


class PortInUse(ConfigurationError):
    """The port a server was asked to listen on is taken."""

    code = "port_in_use"


class DevAlreadyRunning(ConfigurationError):
    """Another `keel-stream dev` holds the data directory's lock; the message names its pid."""

    code = "dev_already_running"
