"""Checks made before anything starts, so a command fails early and says why."""

from __future__ import annotations

import errno
import socket

from keel_stream.errors import InvalidSetting, PortInUse

__all__ = ["ensure_port_free"]


def ensure_port_free(host: str, port: int, *, hint: str) -> None:
    """Refuse a port something already listens on (0 asks for any free port: always fine).

    The probe binds as uvicorn does (SO_REUSEADDR), so only a live listener counts as busy.
    hint says how to choose another (which variable or flag).
    """
    if port == 0:
        return
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise PortInUse(f"{host}:{port} is already in use; {hint}") from None
        raise InvalidSetting(f"cannot listen on {host}:{port} ({exc}); {hint}") from None
