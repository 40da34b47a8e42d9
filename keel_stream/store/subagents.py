"""Subagent links: which session is a child of which (the call it answers, its depth, its tree),
written only while the tree is under its budget; pages of a session's children, and a cancel
that reaches a whole subtree; on PostgreSQL or in memory."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final, Protocol

import asyncpg

from keel_stream.store.driver_errors import translated
from keel_stream.store.sqlfiles import query

__all__ = ["ChildRow", "Link", "MemorySubagents", "PostgresSubagents", "SubagentTree", "Subagents"]

TREE_LOCK_CLASS: Final = 0x6B737562  # "ksub": serialises the links of one tree


@dataclass(frozen=True, slots=True)
class Link:
    parent: str
    tool_call_id: str
    depth: int
    root: str


@dataclass(frozen=True, slots=True)
class ChildRow:
    session: str
    tool_call_id: str
    depth: int
    root: str
    created_at: datetime
    run_status: str | None
    last_seq: int


class Subagents(Protocol):
    async def link(self, tenant: str, child: str, link: Link, budget: int) -> bool:
        """Record the child's link if its tree holds fewer than `budget` subagents; whether the
        child is linked (now, or by an earlier write, which a second one leaves as it is)."""
        ...


class SubagentTree(Subagents, Protocol):
    """The links as the API reads them: a child's link, a parent's children, a whole tree."""

    async def link_of(self, tenant: str, child: str) -> Link | None: ...

    async def children(
        self, tenant: str, parent: str, cursor: str | None, limit: int
    ) -> list[ChildRow]: ...

    async def tree(self, tenant: str, session: str, limit: int) -> list[str]:
        """The session and the sessions below it, the nearest first."""
        ...

    async def cancel_tree(self, tenant: str, session: str) -> tuple[int, int]:
        """Mark the session's and its descendants' pending or running runs cancelled; (marked,
        running ones told at once)."""
        ...


class PostgresSubagents:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def link(self, tenant: str, child: str, link: Link, budget: int) -> bool:
        async with (
            translated("link a subagent"),
            self._pool.acquire() as conn,
            conn.transaction(),
        ):
            await conn.execute(query("subagent_tree_lock"), TREE_LOCK_CLASS, tenant, link.root)
            linked = await conn.fetchval(
                query("subagent_link"), tenant, child, link.parent, link.tool_call_id,
                link.depth, link.root, budget,
            )  # fmt: skip
        return bool(linked)

    async def link_of(self, tenant: str, child: str) -> Link | None:
        async with translated("read a subagent link"):
            row = await self._pool.fetchrow(query("subagent_link_of"), tenant, child)
        if row is None:
            return None
        return Link(row["parent_session"], row["tool_call_id"], row["depth"], row["root_session"])

    async def children(
        self, tenant: str, parent: str, cursor: str | None, limit: int
    ) -> list[ChildRow]:
        async with translated("list subagents"):
            rows = await self._pool.fetch(query("subagent_children"), tenant, parent, cursor, limit)
        return [
            ChildRow(r["child_session"], r["tool_call_id"], r["depth"], r["root_session"],
                     r["created_at"], r["run_status"], int(r["last_seq"]))
            for r in rows
        ]  # fmt: skip

    async def tree(self, tenant: str, session: str, limit: int) -> list[str]:
        """The session and the sessions below it, the nearest first."""
        async with translated("read a subagent tree"):
            rows = await self._pool.fetch(query("subagent_tree_sessions"), tenant, session, limit)
        return [str(r["session_id"]) for r in rows]

    async def cancel_tree(self, tenant: str, session: str) -> tuple[int, int]:
        """Mark the session's and its descendants' pending or running runs cancelled; (marked,
        running ones told at once)."""
        async with translated("cancel a subagent tree"):
            row = await self._pool.fetchrow(query("subagent_tree_cancel"), tenant, session)
        return (int(row["marked"]), int(row["told"])) if row is not None else (0, 0)


class MemorySubagents:
    """Links in memory (for the memory store's workers)."""

    def __init__(self) -> None:
        self._links: dict[tuple[str, str], Link] = {}

    async def link(self, tenant: str, child: str, link: Link, budget: int) -> bool:
        if (tenant, child) not in self._links:
            size = sum(
                1 for (t, _), o in self._links.items() if t == tenant and o.root == link.root
            )
            if size >= budget:
                return False
            self._links[(tenant, child)] = link
        return True
