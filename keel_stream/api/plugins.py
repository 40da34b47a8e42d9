"""`GET /v1/plugins`: the plugins this process found installed (docs/plugins.md).

The API process loads the plugin list the same way a worker does (the same entry points, the
same KEEL_PLUGINS_ENABLED, from the settings the command built), once, at the first request;
it lists them and never runs them.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from keel_stream.api.deps import ERRORS, Config, Tenant
from keel_stream.plugins import GROUPS, plugin_catalog

__all__ = ["router"]

router = APIRouter(tags=["v1"])


@router.get("/v1/plugins", responses=ERRORS)
async def list_plugins(tenant: Tenant, config: Config) -> dict[str, Any]:
    """Each installed distribution advertising keel-stream entry points: `distribution`,
    `version`, `status` (`loaded`, `error`: one of its entry points failed, `disabled`: not
    in KEEL_PLUGINS_ENABLED), `error`, `entryPoints` by group, `details` per entry point and
    the `tools` it provides with their `schemaDigest`. Projection plugins are loaded and
    listed, not hosted by the projector (`projectionsHosted: false`)."""
    catalog = plugin_catalog(config.settings.plugins_enabled)
    return {
        "groups": [str(group) for group in GROUPS],
        "projectionsHosted": False,
        "plugins": catalog.view(),
    }
