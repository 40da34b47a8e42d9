"""Worker metrics (Prometheus): runs claimed, taken over and settled, the attempts running, the
model requests (latency, errors) and the tokens the providers report."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from prometheus_client import Counter, Gauge, Histogram

from keel_stream.kernel import StopReason
from keel_stream.worker.providers.base import Finish

__all__ = [
    "ACTIVE",
    "CLAIMED",
    "PROVIDER_ERRORS",
    "PROVIDER_LATENCY",
    "SETTLED",
    "TAKEOVERS",
    "TOKENS",
    "error_code",
    "observe_answer",
]

CLAIMED: Final = Counter("keel_worker_runs_claimed", "Runs this worker claimed (takeovers too)")
TAKEOVERS: Final = Counter(
    "keel_worker_takeovers",
    "Claims that took a run over from a worker whose lease expired (its attempt is settled first)",
)
SETTLED: Final = Counter(
    "keel_worker_runs_settled",
    "Attempts settled, by outcome (done, failed, cancelled) and the run status it left "
    "(done, failed, or pending: retried or owed another turn)",
    ["status", "run_status"],
)
ACTIVE: Final = Gauge("keel_worker_active_runs", "Attempts this worker runs now")
PROVIDER_LATENCY: Final = Histogram(
    "keel_worker_provider_request_seconds",
    "One model request, from sending it to its finish (the provider's own retries included)",
    ["provider"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600),
)
PROVIDER_ERRORS: Final = Counter(
    "keel_worker_provider_errors",
    "Model requests that finished with an error, by kind (permanent, transient) and code "
    "(http_<status> or the error's class)",
    ["provider", "kind", "code"],
)
TOKENS: Final = Counter(
    "keel_worker_tokens",
    "Tokens the provider reported, by direction (input, output)",
    ["provider", "direction"],
)

_HTTP: Final = re.compile(r"HTTP (\d{3})\b")
_CLASS: Final = re.compile(r"([A-Za-z_][A-Za-z0-9_.]{0,63}):")
_DIRECTIONS: Final = ("input", "output")


def error_code(error: str | None) -> str:
    """A bounded label for a provider error: `http_<status>`, the exception class that caused
    it, or `other`."""
    text = (error or "").strip()
    if (http := _HTTP.match(text)) is not None:
        return f"http_{http.group(1)}"
    if (named := _CLASS.match(text)) is not None:
        return named.group(1).rsplit(".", 1)[-1]
    return "other"


def _count_tokens(provider: str, usage: Mapping[str, int] | None) -> None:
    for direction in _DIRECTIONS:
        value = (usage or {}).get(direction)
        if isinstance(value, int) and value > 0:
            TOKENS.labels(provider, direction).inc(value)


def observe_answer(provider: str, seconds: float, finish: Finish, *, cancelled: bool) -> None:
    """Record one model request: its latency, its tokens, and its error if it failed (a
    cancelled request is no provider error)."""
    PROVIDER_LATENCY.labels(provider).observe(seconds)
    _count_tokens(provider, finish.usage)
    if finish.stop_reason == StopReason.ERROR and not cancelled:
        kind = "transient" if finish.retriable else "permanent"  # label values: documented
        PROVIDER_ERRORS.labels(provider, kind, error_code(finish.error)).inc()
