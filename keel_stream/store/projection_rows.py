"""The transcript's rows in PostgreSQL (migration 0032, projections.transcript_rows): its entries
in `transcript_entries`, its head in `projection_states`.

A batch reads only what its fold needs beyond the heads (the stored calls its tool results pair
with; the stored context, for a compaction) and writes, in one statement, the heads and the rows
that changed. A rebuild writes the new generation's rows with COPY. A read assembles the
document from the head and the rows in one statement, so it sees one snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, runtime_checkable

import asyncpg
import orjson

from keel_stream.projections.transcript_rows import TranscriptRows, assemble
from keel_stream.store.connect import init_connection
from keel_stream.store.driver_errors import translated
from keel_stream.store.sqlfiles import query

__all__ = [
    "ENTRY_COLUMNS",
    "TRANSCRIPT",
    "EntryRow",
    "TranscriptRowStatements",
    "TranscriptRowsTransaction",
    "TranscriptWrite",
    "read_transcripts",
]

TRANSCRIPT: Final = "transcript"
"""The projection whose states are stored as rows."""
ENTRY_COLUMNS: Final = ("generation", "tenant_id", "session_id", "seq", "position", "entry")
_Key = tuple[str, str]
EntryRow = tuple[int, str, str, int, int | None, Any]
"""A row of transcript_entries, in ENTRY_COLUMNS order."""


@dataclass(frozen=True, slots=True)
class TranscriptWrite:
    """What one session's batch changed: its new last seq and rows."""

    key: _Key
    last_seq: int
    rows: TranscriptRows


@runtime_checkable
class TranscriptRowsTransaction(Protocol):
    """A projection transaction that stores transcripts as rows (PostgreSQL's does; a store
    without it keeps every state as a document)."""

    async def transcript_calls(
        self, generation: int, wanted: Mapping[_Key, Iterable[str]]
    ) -> dict[_Key, dict[str, str]]: ...

    async def transcript_context(
        self, generation: int, keys: Sequence[_Key]
    ) -> dict[_Key, list[tuple[int, int]]]: ...

    async def write_transcripts(
        self, projection: str, generation: int, writes: Sequence[TranscriptWrite]
    ) -> None: ...

    async def copy_transcript_entries(self, rows: Iterable[EntryRow]) -> int: ...


def _binary_json(value: Any) -> bytes:
    return orjson.dumps(value)  # json's binary form is its text


class TranscriptRowStatements:
    """The transcript's statements on the connection that holds a transaction."""

    _db: asyncpg.Pool | asyncpg.Connection

    async def transcript_calls(
        self, generation: int, wanted: Mapping[_Key, Iterable[str]]
    ) -> dict[_Key, dict[str, str]]:
        """Per session, the names of these stored tool calls (those stored)."""
        triples = [(k[0], k[1], c) for k, calls in wanted.items() for c in sorted(calls)]
        if not triples:
            return {}
        async with translated("read transcript calls"):
            rows = await self._db.fetch(
                query("projection_transcript_calls"),
                generation,
                *(list(column) for column in zip(*triples, strict=True)),
            )
        found: dict[_Key, dict[str, str]] = {}
        for r in rows:
            found.setdefault((r["tenant_id"], r["session_id"]), {})[r["call_id"]] = r["name"]
        return found

    async def transcript_context(
        self, generation: int, keys: Sequence[_Key]
    ) -> dict[_Key, list[tuple[int, int]]]:
        """Per session, its stored context as (seq, position) in context order."""
        if not keys:
            return {}
        async with translated("read transcript context"):
            rows = await self._db.fetch(
                query("projection_transcript_context"),
                generation,
                [k[0] for k in keys],
                [k[1] for k in keys],
            )
        found: dict[_Key, list[tuple[int, int]]] = {k: [] for k in keys}
        for r in rows:
            found[(r["tenant_id"], r["session_id"])].append((r["seq"], r["position"]))
        return found

    async def write_transcripts(
        self, projection: str, generation: int, writes: Sequence[TranscriptWrite]
    ) -> None:
        """Write heads, then the rows of the sessions whose head advanced (one statement)."""
        if not writes:
            return
        added = [(w.key, s, p, e) for w in writes for s, p, e in w.rows.entries]
        moved = [(w.key, s, p) for w in writes for s, p in w.rows.moved.items()]
        async with translated("write transcripts"):
            await self._db.execute(
                query("projection_transcript_write"),
                projection,
                generation,
                [w.key[0] for w in writes],
                [w.key[1] for w in writes],
                [w.last_seq for w in writes],
                [w.rows.head for w in writes],
                [a[0][0] for a in added],
                [a[0][1] for a in added],
                [a[1] for a in added],
                [a[2] for a in added],
                [a[3] for a in added],
                [m[0][0] for m in moved],
                [m[0][1] for m in moved],
                [m[1] for m in moved],
                [m[2] for m in moved],
            )

    async def copy_transcript_entries(self, rows: Iterable[EntryRow]) -> int:
        """COPY new entry rows (a rebuild's, into its new generation: none of them is stored
        yet). json goes in its binary form for the COPY, keel's codec is set back after."""
        conn = self._db
        if isinstance(conn, asyncpg.Pool):
            raise TypeError("COPY needs the connection of a transaction")
        copied = False
        async with translated("copy transcript entries"):
            try:
                await conn.set_type_codec(
                    "json",
                    encoder=_binary_json,
                    decoder=orjson.loads,
                    schema="pg_catalog",
                    format="binary",
                )
                status = await conn.copy_records_to_table(
                    "transcript_entries", records=rows, columns=ENTRY_COLUMNS
                )
                copied = True
            finally:
                if copied:
                    await init_connection(conn)
                else:
                    conn.terminate()  # its codec may be the COPY's: it must not be reused
        return int(status.split()[-1])


async def read_transcripts(
    db: asyncpg.Pool | asyncpg.Connection, projection: str, keys: Sequence[_Key]
) -> dict[_Key, tuple[int, dict[str, Any]]]:
    """The live transcripts of these sessions (those that have one): last seq and document."""
    if not keys:
        return {}
    async with translated("read transcripts"):
        rows = await db.fetch(
            query("projection_transcript_read"),
            projection,
            [k[0] for k in keys],
            [k[1] for k in keys],
        )
    return {
        (r["tenant_id"], r["session_id"]): (
            int(r["last_seq"]),
            assemble(r["state"], zip(r["positions"], r["entries"], strict=True)),
        )
        for r in rows
    }
