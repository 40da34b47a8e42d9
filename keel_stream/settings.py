"""Settings from KEEL_* environment variables (and flags that override them)."""

from __future__ import annotations

from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["KeelSettings"]


class KeelSettings(BaseSettings):
    """Everything keel-stream reads from its environment."""

    model_config = SettingsConfigDict(env_prefix="KEEL_", extra="ignore")

    database_url: str | None = None
    """PostgreSQL to use; unset: `keel-stream dev` starts an embedded one in data_dir."""
    data_dir: Path = Path(".keel")
    """Where embedded servers keep their data."""
    log_level: str = "info"
