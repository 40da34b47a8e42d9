"""The tenant configuration document's errors."""

from __future__ import annotations

from keel_stream.errors.base import InvalidRequest, NotFound

__all__ = ["ConfigNotFound", "InvalidConfig", "LiteralSecret"]


class InvalidConfig(InvalidRequest):
    """A tenant configuration document that breaks the schema: an unknown field, a literal
    secret where only a reference is accepted, a declared variable missing at start-up."""

    code = "invalid_config"


class ConfigNotFound(NotFound):
    """The tenant has no configuration document yet (`keel-stream tenants config set`)."""

    code = "config_not_found"


class LiteralSecret(InvalidConfig):
    """A secret-shaped literal in a provider's args or url (credentials in a URL, a secret-named
    query parameter or flag with a literal value, a well-known key shape): use a reference."""

    code = "literal_secret"
