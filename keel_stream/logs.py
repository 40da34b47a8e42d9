"""Structured logging: one configuration for every process keel-stream runs.

Our own lines go through structlog; the standard-library loggers of what we host (uvicorn,
Faust and mode, asyncio) are routed through the same processors, so a process writes one
format. JSON lines carry no terminal escape codes: exceptions are rendered as plain text, and
any escape sequence in a value (a colored message of some library) is removed.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any, Final, Literal

import structlog
from structlog.types import Processor

__all__ = [
    "ROUTED_LOGGERS",
    "LogFormat",
    "configure_logging",
    "get_logger",
    "route_stdlib_logging",
]

LogFormat = Literal["auto", "json", "console"]
"""auto: console on a terminal, JSON otherwise."""

ROUTED_LOGGERS: Final = ("uvicorn", "uvicorn.access", "faust", "mode", "asyncio")
"""Standard-library loggers that log through our pipeline (their children propagate to them)."""

_ANSI: Final = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_handler: logging.Handler | None = None


def _strip_escapes(
    logger: Any, method: str, event_dict: MutableMapping[str, Any]
) -> Mapping[str, Any]:
    for key, value in event_dict.items():
        if isinstance(value, str) and "\x1b" in value:
            event_dict[key] = _ANSI.sub("", value).replace("\x1b", "")
    return event_dict


def _renders_json(log_format: LogFormat) -> bool:
    if log_format == "auto":
        return not sys.stderr.isatty()
    return log_format == "json"


def _rendering(as_json: bool, no_color: str | None) -> list[Processor]:
    """The last processors: exceptions formatted, then the line rendered."""
    if as_json:
        return [
            structlog.processors.format_exc_info,
            _strip_escapes,
            structlog.processors.JSONRenderer(),
        ]
    if sys.stderr.isatty() and not no_color:
        return [structlog.dev.ConsoleRenderer(colors=True)]
    # Off a terminal: no colors, neither in values nor in tracebacks (rich's would honour
    # FORCE_COLOR).
    plain = structlog.dev.ConsoleRenderer(
        colors=False, exception_formatter=structlog.dev.plain_traceback
    )
    return [_strip_escapes, plain]


def configure_logging(
    level: str = "info", log_format: LogFormat = "auto", no_color: str | None = None
) -> None:
    """Lines on stderr: JSON, or key=value on a terminal (`log_format` auto), colored unless
    `no_color` (NO_COLOR) is set; the standard library's ROUTED_LOGGERS write the same lines.
    The command passes its settings' log_format and no_color."""
    global _handler
    threshold = logging.getLevelName(level.upper())
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    rendering = _rendering(_renders_json(log_format), no_color)
    structlog.configure(
        processors=[*shared, *rendering],
        wrapper_class=structlog.make_filtering_bound_logger(threshold),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(threshold)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *rendering],
        )
    )
    _handler = handler
    route_stdlib_logging()


def route_stdlib_logging(*names: str) -> None:
    """Send these standard-library loggers (default ROUTED_LOGGERS) through our pipeline,
    replacing whatever handlers they had. uvicorn installs its own (colored) handlers when its
    server is configured: call this again after that."""
    if _handler is None:
        return
    for name in names or ROUTED_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers[:] = [_handler]
        logger.propagate = False


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    """A logger bound to a component name."""
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(component=name)
    return logger
