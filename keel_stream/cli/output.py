"""Tables on stdout: aligned by rich on a terminal, one unwrapped line per row in a pipe."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.console import Console
from rich.table import Table

__all__ = ["print_table"]

_PIPE_WIDTH = 10_000
"""Piped output is read by programs: a row must never wrap, whatever its width."""


def print_table(
    headers: Sequence[str], rows: Iterable[Sequence[object]], *, numeric: Iterable[str] = ()
) -> None:
    """One header line, then one line per row; the numeric columns are right-aligned."""
    right = set(numeric)
    table = Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
    for header in headers:
        table.add_column(header, justify="right" if header in right else "left", no_wrap=True)
    for row in rows:
        table.add_row(*("" if cell is None else str(cell) for cell in row))
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=_PIPE_WIDTH)
    console.print(table)
