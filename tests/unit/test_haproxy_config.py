"""The balancer's configuration for API replicas (keel_stream.dev.haproxy)."""

from __future__ import annotations

import re
from pathlib import Path

from keel_stream.api.deps import ApiConfig
from keel_stream.dev.haproxy import HEADER, Replica, haproxy_config

CONFIG = haproxy_config(8000, [Replica("api0", 8001), Replica("api1", 8002)], Path("/tmp/a.sock"))


def directive(name: str) -> list[str]:
    return re.findall(rf"^\s*{name}\s+(.+)$", CONFIG, re.MULTILINE)


def seconds(value: str) -> float:
    number, unit = re.fullmatch(r"(\d+)(ms|s|m)?", value.strip()).groups()  # type: ignore[union-attr]
    return int(number) * {"ms": 0.001, "s": 1, "m": 60, None: 0.001}[unit]


def test_a_quiet_sse_stream_outlives_the_balancers_timeouts_by_two_heartbeats() -> None:
    # An SSE response is plain HTTP to HAProxy: `timeout server` and `timeout client` bound
    # its silences (measured: a stream quiet for 3 s is cut at 2 s whatever `timeout tunnel` says).
    heartbeat = ApiConfig.heartbeat_s
    for side in ("client", "server"):
        (value,) = directive(f"timeout {side}")
        assert seconds(value) >= 2 * heartbeat, side


def test_replicas_are_checked_on_readyz_and_taken_in_turn() -> None:
    assert directive("balance") == ["roundrobin"]
    assert directive("http-check send") == ["meth GET uri /readyz"]
    assert directive("http-check expect") == ["status 200"]
    assert directive("server") == ["api0 127.0.0.1:8001 check", "api1 127.0.0.1:8002 check"]
    assert directive("http-response set-header") == [f"{HEADER} %[srv_name]"]


def test_the_balancer_retries_only_what_never_reached_a_replica() -> None:
    # A POST that reached a replica which then died may have been committed: only the client,
    # with its requestId, may send it again.
    assert directive("retry-on") == ["conn-failure"]
    assert not directive("option http-server-close"), "streams are long responses: keep-alive"
