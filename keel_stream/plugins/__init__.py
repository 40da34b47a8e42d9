"""Plugins: tools, model providers and projections from installed Python packages (entry point
groups ``keel_stream.tools``, ``keel_stream.providers``, ``keel_stream.projections``); see
docs/plugins.md."""

from keel_stream.plugins.loader import (
    PluginCatalog,
    active_plugins,
    enabled_from,
    load_at_start,
    load_plugins,
    plugin_catalog,
    stop_using_plugins,
)
from keel_stream.plugins.model import (
    GROUPS,
    EntryPointReport,
    Group,
    PluginReport,
    PluginTool,
    Status,
    schema_digest,
)

__all__ = [
    "GROUPS",
    "EntryPointReport",
    "Group",
    "PluginCatalog",
    "PluginReport",
    "PluginTool",
    "Status",
    "active_plugins",
    "enabled_from",
    "load_at_start",
    "load_plugins",
    "plugin_catalog",
    "schema_digest",
    "stop_using_plugins",
]
