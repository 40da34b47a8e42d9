"""The caller's tenant configuration document, redacted: references only, never a value."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from keel_stream.api.deps import ERRORS, Svc, Tenant
from keel_stream.errors import ConfigNotFound
from keel_stream.tenancy.document import redacted

__all__ = ["TenantConfigView", "router"]

router = APIRouter(tags=["v1"])


class TenantConfigView(BaseModel):
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    tenant: str
    version: int
    created_at: datetime = Field(alias="createdAt")
    document: dict[str, Any]


@router.get("/v1/tenant/config", response_model=TenantConfigView, responses=ERRORS)
async def get_tenant_config(services: Svc, tenant: Tenant) -> TenantConfigView:
    """The newest version of the tenant's configuration document (`keel-stream tenants config
    set`); every env and headers value is shown as its secret reference, and a secret-shaped
    literal in args or url (in a document stored before it was refused) as `[redacted]`. 404
    before the first."""
    stored = await services.tenant_configs.latest(tenant)
    if stored is None:
        raise ConfigNotFound(f"tenant {tenant!r} has no configuration document")
    return TenantConfigView(
        tenant=tenant,
        version=stored.version,
        created_at=stored.created_at,
        document=redacted(stored.config),
    )
