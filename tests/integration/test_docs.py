"""The Python examples in docs/ run as written."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parents[2]


async def test_ledger_example_runs(database_dsn: str) -> None:
    text = (ROOT / "docs" / "ledger.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/ledger.md", "exec"), namespace)
    example = cast(Callable[[str], Awaitable[None]], namespace["example"])
    await example(database_dsn)
