"""Each process exports its own components' metrics; the worker and projector metrics count
what they say (on the memory store, no servers)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, generate_latest

import keel_stream.api.ops  # registers the API's family
import keel_stream.relay.metrics  # noqa: F401 - registers the relay's families
from keel_stream.kernel import CommitRequest
from keel_stream.kernel.types import Event
from keel_stream.metrics import Component, registry_for
from keel_stream.projections.base import Projection
from keel_stream.projections.transcript import TRANSCRIPT
from keel_stream.projector.metrics import AppliedTally, forget_lag, set_lag
from keel_stream.store import MemoryStore
from keel_stream.worker.metrics import error_code
from keel_stream.worker.worker import Worker, WorkerConfig
from tests.support.wait import wait_until


def names(registry: CollectorRegistry) -> set[str]:
    return {family.name for family in registry.collect()}


def test_a_component_registry_exports_its_families_and_those_outside_keel() -> None:
    source = CollectorRegistry()
    Gauge("keel_relay_backlog", "relay", registry=source)
    Gauge("keel_api_streams", "api", registry=source)
    Counter("keel_worker_runs", "worker", registry=source)
    Gauge("process_open_fds", "process", registry=source)
    assert names(registry_for([Component.RELAY], source)) == {
        "keel_relay_backlog",
        "process_open_fds",
    }
    assert names(registry_for([Component.API, Component.WORKER], source)) == {
        "keel_api_streams",
        "keel_worker_runs",
        "process_open_fds",
    }


@pytest.mark.parametrize(
    "component", [Component.API, Component.PROJECTOR, Component.RELAY, Component.WORKER]
)
def test_the_default_registry_is_exported_one_component_at_a_time(component: Component) -> None:
    everything = names(REGISTRY)
    exported = names(registry_for([component]))
    assert any(n.startswith(component.prefix) for n in exported), exported
    assert [
        n for n in exported if n.startswith("keel_") and not n.startswith(component.prefix)
    ] == []
    assert {n for n in everything if not n.startswith("keel_")} <= exported
    text = generate_latest(registry_for([component])).decode()
    others = {c.prefix for c in Component} - {component.prefix}
    assert not any(f"# TYPE {prefix}" in text for prefix in others)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        ("HTTP 429: slow down (gave up after 3 attempts)", "http_429"),
        ("ConnectTimeout: timed out", "ConnectTimeout"),
        ("httpx.ReadError: reset", "ReadError"),
        ("fake provider failure", "other"),
        (None, "other"),
    ],
)
def test_a_provider_error_is_labelled_by_a_bounded_code(error: str | None, code: str) -> None:
    assert error_code(error) == code


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@contextlib.asynccontextmanager
async def running_worker(store: MemoryStore) -> AsyncIterator[None]:
    config = replace(
        WorkerConfig(database_url="memory:"), lease_ttl_s=1.5, poll_s=0.02, drain_grace_s=1.0
    )
    stop = asyncio.Event()
    task = asyncio.create_task(Worker(config).run(stop, memory=store))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def settled_done(store: MemoryStore) -> None:
    async def done() -> bool:
        session = store.find("acme", "s1")
        return session is not None and session.run is not None and session.run.status == "done"

    await wait_until(done, 10, "the run to settle done", interval_s=0.01)


async def new_store(text: str) -> MemoryStore:
    store = MemoryStore()
    await store.create_tenant("acme")
    await store.create_session("acme", "s1")
    request = CommitRequest(
        tenant_id="acme", session_id="s1", kind="user.message", payload={"text": text}, key="r1"
    )
    await store.commit(request)
    return store


WORKER_SAMPLES = {
    "claimed": ("keel_worker_runs_claimed_total", {}),
    "failed_then_pending": (
        "keel_worker_runs_settled_total",
        {"status": "failed", "run_status": "pending"},
    ),
    "done": ("keel_worker_runs_settled_total", {"status": "done", "run_status": "done"}),
    "errors": (
        "keel_worker_provider_errors_total",
        {"provider": "fake", "kind": "transient", "code": "other"},
    ),
    "requests": ("keel_worker_provider_request_seconds_count", {"provider": "fake"}),
    "input": ("keel_worker_tokens_total", {"provider": "fake", "direction": "input"}),
    "output": ("keel_worker_tokens_total", {"provider": "fake", "direction": "output"}),
    "active": ("keel_worker_active_runs", {}),
    "takeovers": ("keel_worker_takeovers_total", {}),
}


def worker_samples() -> dict[str, float]:
    return {key: sample(name, **labels) for key, (name, labels) in WORKER_SAMPLES.items()}


async def test_the_worker_counts_claims_settlements_requests_errors_and_tokens() -> None:
    store = await new_store("[[fail:1]] hello keel")
    before = worker_samples()
    async with running_worker(store):
        await settled_done(store)
    after = worker_samples()
    delta = {key: after[key] - before[key] for key in after}
    assert {k: delta[k] for k in ("claimed", "failed_then_pending", "done", "errors")} == {
        "claimed": 2,
        "failed_then_pending": 1,
        "done": 1,
        "errors": 1,
    }
    assert delta["requests"] == 2
    assert delta["input"] > 0
    assert delta["output"] > 0
    assert (delta["active"], delta["takeovers"]) == (0, 0)


async def test_a_claim_of_an_expired_lease_counts_as_a_takeover() -> None:
    store = await new_store("hello")
    assert await store.runs("dead", 0.05).claim() is not None
    before = sample("keel_worker_takeovers_total")
    async with running_worker(store):
        await settled_done(store)
    assert sample("keel_worker_takeovers_total") - before == 1


def user_messages(count: int) -> list[Event]:
    now = datetime.now(UTC)
    return [
        Event.trusted("acme", "s1", seq, "user.message", {"text": f"m{seq}"}, now)
        for seq in range(1, count + 1)
    ]


def fold_then_fail(projection: Projection[Any]) -> None:
    projection.apply_many(projection.initial(), user_messages(3))
    raise RuntimeError("the transaction failed: the batch is applied again later")


def test_applied_events_count_per_projection_once_their_batch_commits() -> None:
    tally = AppliedTally()
    (transcript,) = tally.wrap([TRANSCRIPT])
    before = sample("keel_projector_applied_events_total", projection="transcript")
    with pytest.raises(RuntimeError), tally.batch():
        fold_then_fail(transcript)
    assert sample("keel_projector_applied_events_total", projection="transcript") == before
    with tally.batch():
        transcript.apply_many(transcript.initial(), user_messages(3))
    assert sample("keel_projector_applied_events_total", projection="transcript") == before + 3


def test_lag_is_high_water_minus_position_for_the_partitions_assigned() -> None:
    set_lag("t.events", {0: 5, 1: 7}, {0: 9, 1: None})
    assert sample("keel_projector_lag_events", topic="t.events", partition="0") == 4
    assert (
        REGISTRY.get_sample_value(
            "keel_projector_lag_events", {"topic": "t.events", "partition": "1"}
        )
        is None
    )
    forget_lag("t.events", [0, 1])
    assert (
        REGISTRY.get_sample_value(
            "keel_projector_lag_events", {"topic": "t.events", "partition": "0"}
        )
        is None
    )
