"""The README's quick start, run as written."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import pytest

from keel_stream.kafka.broker import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
async def test_readme_quick_start(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    (script,) = re.findall(r"## Quick start.*?```bash\n(.*?)```", readme, re.DOTALL)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("KEEL_DATABASE_URL", "KEEL_KAFKA_BOOTSTRAP", "KEEL_DEV_API_KEY")
    }
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"  # the venv is "active"
    env["PORT"] = str(free_port())
    process = await asyncio.create_subprocess_exec(
        "bash", "-c", script, cwd=tmp_path, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await asyncio.wait_for(process.communicate(), 240)
    text = output.decode()
    log = (tmp_path / "dev.log").read_text() if (tmp_path / "dev.log").exists() else ""
    assert '"created":true' in text, text + log
    for frame in ("id: 1\nevent: user.message", "id: 2\nevent: assistant.message",
                  "id: 3\nevent: run.finished"):  # fmt: skip
        assert frame in text.replace("\r\n", "\n"), text + log
    assert "echo: hello keel" in text
    assert '"inputSeqs":[1]' in text
