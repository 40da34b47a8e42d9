"""A session's subagents over HTTP: its children, paged with the seed's limits."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Final

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from keel_stream.api.deps import ERRORS, Svc, Tenant, session_row

__all__ = ["SUBAGENTS_PAGE_DEFAULT", "SUBAGENTS_PAGE_MAX", "router"]

SUBAGENTS_PAGE_DEFAULT: Final = 50
SUBAGENTS_PAGE_MAX: Final = 200
_CURSOR: Final = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"

router = APIRouter(tags=["v1"])


class _Wire(BaseModel):
    model_config = ConfigDict(
        populate_by_name=True, serialize_by_alias=True, alias_generator=to_camel
    )


class SubagentView(_Wire):
    id: str = Field(description="The child session.")
    tool_call_id: str = Field(description="The parent's delegate call it answers.")
    depth: int
    root: str
    created_at: datetime
    run_status: str | None
    last_seq: int


class SubagentPage(_Wire):
    subagents: list[SubagentView]
    next_cursor: str | None


@router.get("/v1/sessions/{session_id}/subagents", response_model=SubagentPage, responses=ERRORS)
async def list_subagents(
    services: Svc,
    tenant: Tenant,
    session_id: str,
    limit: Annotated[int, Query(ge=1, le=SUBAGENTS_PAGE_MAX)] = SUBAGENTS_PAGE_DEFAULT,
    cursor: Annotated[str | None, Query(max_length=128, pattern=_CURSOR)] = None,
) -> SubagentPage:
    """The session's children (its own delegate calls), by id; `nextCursor` for the next page.
    A child's own children are on the child (`GET /v1/sessions/{child}/subagents`)."""
    await session_row(services, tenant, session_id)
    rows = await services.subagents.children(tenant, session_id, cursor, limit)
    views = [
        SubagentView(
            id=r.session,
            tool_call_id=r.tool_call_id,
            depth=r.depth,
            root=r.root,
            created_at=r.created_at,
            run_status=r.run_status,
            last_seq=r.last_seq,
        )
        for r in rows
    ]
    return SubagentPage(subagents=views, next_cursor=views[-1].id if len(views) == limit else None)
