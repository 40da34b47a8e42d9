"""Log lines: JSON without terminal escape codes whoever logs (structlog, uvicorn, Faust,
asyncio), even with FORCE_COLOR; the console format on request; sane request ids only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import httpx
import pytest
from pydantic import ValidationError
from starlette.types import Receive, Scope, Send
from structlog.testing import capture_logs

from keel_stream.api.access_log import AccessLog, request_id_of
from keel_stream.settings import KeelSettings

# A process of its own: its stderr is a pipe (no terminal), as under a supervisor.
SCRIPT = r"""
import asyncio, logging, uvicorn
from keel_stream.logs import configure_logging, get_logger, route_stdlib_logging
from keel_stream.settings import KeelSettings

settings = KeelSettings()  # this script is the edge, as a command's start is
configure_logging("info", settings.log_format, settings.no_color)
uvicorn.Config(lambda scope, receive, send: None, log_level="warning")  # its colored handlers
route_stdlib_logging()
log = get_logger("test")
log.info("plain", value="\x1b[31mred\x1b[0m")
try:
    1 / 0
except ZeroDivisionError:
    log.exception("structlog exception")
    logging.getLogger("uvicorn.error").exception("Exception in ASGI application")
    logging.getLogger("faust.worker").error("faust \x1b[1mcrash", exc_info=True)
logging.getLogger("asyncio").error("Task exception was never retrieved")
logging.getLogger("uvicorn.error").warning("Invalid HTTP request received.")
"""


def run(env: dict[str, str]) -> str:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env={**environment, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout == ""
    return result.stderr


def entries(text: str) -> list[dict[str, Any]]:
    assert "\x1b" not in text, text
    assert "\\u001b" not in text, text
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.parametrize("log_format", [None, "json"])
def test_every_line_is_json_without_escape_codes_despite_force_color(log_format: str) -> None:
    env = {"FORCE_COLOR": "1"} | ({"KEEL_LOG_FORMAT": log_format} if log_format else {})
    lines = entries(run(env))
    assert [line["event"] for line in lines] == [
        "plain",
        "structlog exception",
        "Exception in ASGI application",
        "faust crash",
        "Task exception was never retrieved",
        "Invalid HTTP request received.",
    ]
    assert lines[0]["value"] == "red"
    for line in lines[1:4]:
        assert "ZeroDivisionError: division by zero" in line["exception"], line
    assert [line.get("logger") for line in lines[2:]] == [
        "uvicorn.error",
        "faust.worker",
        "asyncio",
        "uvicorn.error",
    ]


def test_the_console_format_is_chosen_by_setting_and_colorless_off_a_terminal() -> None:
    text = run({"KEEL_LOG_FORMAT": "console", "FORCE_COLOR": "1"})
    assert "\x1b" not in text
    assert "structlog exception" in text
    assert "Traceback" in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text.splitlines()[0])


def test_the_log_format_setting_is_a_closed_set() -> None:
    assert KeelSettings(log_format="JSON").log_format == "json"
    with pytest.raises(ValidationError):
        KeelSettings(log_format="xml")


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("req-0001", True),
        ("3f2c9a1e-7d7b-4e4b-9a5c-0c1d2e3f4a5b", True),
        ("abc+/=._:-", True),
        ("a b", False),
        ("evil\r\ninjected", False),
        ("x" * 129, False),
        ("", False),
    ],
)
def test_a_request_id_is_taken_only_when_it_is_a_sane_token(given: str, kept: bool) -> None:
    chosen = request_id_of([(b"x-request-id", given.encode())])
    assert (chosen == given) is kept
    if not kept:
        assert len(chosen) == 32
        assert int(chosen, 16) >= 0


def test_a_request_without_an_id_gets_a_fresh_one() -> None:
    assert request_id_of([]) != request_id_of([])


async def test_the_access_line_says_500_for_a_request_that_raised_and_echoes_the_id() -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] == "/boom":
            raise RuntimeError("a bug")
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    with capture_logs() as logs:
        middleware = AccessLog(app)
        transport = httpx.ASGITransport(app=middleware, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            fine = await client.get("/fine?key=secret", headers={"X-Request-Id": "r-1"})
            await client.get("/boom", headers={"X-Request-Id": "r-2"})
    assert fine.headers["x-request-id"] == "r-1"
    lines = {line["request_id"]: line for line in logs if line["event"] == "request"}
    assert (lines["r-1"]["status"], lines["r-1"]["path"]) == (204, "/fine")
    assert lines["r-2"]["status"] == 500
