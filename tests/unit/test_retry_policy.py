"""The one retry policy (keel_stream.retry): attempts, deadline, Retry-After as a floor, and what
is retried (the relay's and the projector's classifier knows the Kafka client's errors)."""

from __future__ import annotations

import pytest
from aiokafka import errors as kafka

from keel_stream.errors import (
    BrokerError,
    BrokerUnavailable,
    InvalidPayload,
    PayloadRule,
    ProjectionBehind,
    StoreError,
    StoreUnavailable,
)
from keel_stream.logs import get_logger
from keel_stream.relay.retry import is_retriable, relay_retry
from keel_stream.retry import Backoff, Retrying, RetryPolicy, retrying

LOG = get_logger("test")


@pytest.mark.parametrize(
    "error",
    [
        StoreUnavailable("connection refused"),
        ProjectionBehind("not yet"),
        BrokerUnavailable("down"),
        kafka.KafkaConnectionError("no route"),
        kafka.KafkaTimeoutError(),
        kafka.RequestTimedOutError(),
        kafka.NotLeaderForPartitionError(),
        kafka.NodeNotReadyError(),
        ConnectionRefusedError(),
        TimeoutError(),
    ],
)
def test_transient_failures_are_retriable(error: BaseException) -> None:
    assert is_retriable(error)


@pytest.mark.parametrize(
    "error",
    [
        StoreError("syntax error"),
        BrokerError("refused"),
        InvalidPayload(PayloadRule.PAYLOAD_NOT_OBJECT, "not an object"),
        kafka.MessageSizeTooLargeError(),
        kafka.RecordTooLargeError(),
        kafka.TopicAuthorizationFailedError(),
        ValueError("a bug"),
        KeyError("projection"),
    ],
)
def test_everything_else_is_not(error: BaseException) -> None:
    assert not is_retriable(error)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


POLICY = relay_retry(initial_s=1.0, maximum_s=4.0, deadline_s=20.0)


def test_delays_double_up_to_the_maximum_and_reset_on_success() -> None:
    clock = Clock()
    attempts = Retrying(POLICY, LOG, clock)
    delays = [attempts.delay_after(StoreUnavailable("down"), "test") for _ in range(4)]
    for delay, nominal in zip(delays, [1.0, 2.0, 4.0, 4.0], strict=True):
        assert 0.8 * nominal <= delay <= nominal  # jitter takes off at most a fifth
    attempts.succeeded()
    assert attempts.failures == 0
    assert 0.8 <= attempts.delay_after(StoreUnavailable("down"), "test") <= 1.0


def test_a_failure_that_is_not_retriable_is_raised_at_once() -> None:
    attempts = Retrying(POLICY, LOG, Clock())
    error = StoreError("relation does not exist")
    with pytest.raises(StoreError) as raised:
        attempts.delay_after(error, "test")
    assert raised.value is error


def test_a_retry_stops_at_its_deadline() -> None:
    clock = Clock()
    attempts = Retrying(POLICY, LOG, clock)
    attempts.delay_after(StoreUnavailable("first"), "test")
    clock.now = 19.9
    attempts.delay_after(StoreUnavailable("still down"), "test")
    clock.now = 20.0
    last = StoreUnavailable("down for good")
    with pytest.raises(StoreUnavailable) as raised:
        attempts.delay_after(last, "test")
    assert raised.value is last
    assert attempts.failures == 3


async def test_retrying_returns_once_the_action_succeeds() -> None:
    clock = Clock()
    outcomes: list[BaseException | str] = [StoreUnavailable("a"), BrokerUnavailable("b"), "done"]

    async def action() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    assert await retrying(action, "test", POLICY, LOG, sleep=clock.sleep, clock=clock) == "done"
    assert outcomes == []
    assert 0 < clock.now <= 3.0


async def test_retrying_stops_on_the_first_failure_that_is_not_retriable() -> None:
    clock = Clock()
    calls = 0

    async def action() -> None:
        nonlocal calls
        calls += 1
        raise (StoreUnavailable("blip") if calls == 1 else kafka.MessageSizeTooLargeError())

    with pytest.raises(kafka.MessageSizeTooLargeError):
        await retrying(action, "test", POLICY, LOG, sleep=clock.sleep, clock=clock)
    assert calls == 2


async def test_retrying_gives_up_after_the_bound() -> None:
    clock = Clock()
    calls = 0

    async def action() -> None:
        nonlocal calls
        calls += 1
        raise StoreUnavailable("down")

    with pytest.raises(StoreUnavailable):
        await retrying(action, "test", POLICY, LOG, sleep=clock.sleep, clock=clock)
    assert clock.now >= 20.0
    assert 5 <= calls <= 10  # 1 + 2 + 4 + 4 + 4 + 4 ... seconds, with jitter


def test_a_retry_stops_after_its_attempts() -> None:
    attempts = Retrying(RetryPolicy(attempts=3, initial_s=0.0), LOG, Clock())
    attempts.delay_after(StoreUnavailable("1"), "test")
    attempts.delay_after(StoreUnavailable("2"), "test")
    third = StoreUnavailable("3")
    with pytest.raises(StoreUnavailable) as raised:
        attempts.delay_after(third, "test")
    assert raised.value is third


def test_retry_after_is_a_floor_on_the_pause() -> None:
    policy = RetryPolicy(attempts=5, initial_s=0.1, maximum_s=1.0, max_retry_after_s=30)
    assert policy.pause_s(1, retry_after_s=7.0) == 7.0
    pause = policy.pause_s(1, retry_after_s=0.01)
    assert pause is not None  # our own backoff when it is longer
    assert 0.08 <= pause <= 0.1
    assert policy.pause_s(1, retry_after_s=31.0) is None, "asking for more than the limit ends it"


def test_a_retry_after_from_the_server_sets_the_pause_of_retrying() -> None:
    attempts = Retrying(RetryPolicy(attempts=3, initial_s=0.01), LOG, Clock())
    assert attempts.delay_after(StoreUnavailable("busy"), "test", retry_after_s=2.5) == 2.5


def test_a_retry_policy_is_always_bounded() -> None:
    with pytest.raises(ValueError, match="bounded"):
        RetryPolicy()
    with pytest.raises(ValueError, match="invalid"):
        RetryPolicy(attempts=0)


def test_a_failure_that_is_not_retriable_is_never_retried_whatever_the_bound() -> None:
    policy = RetryPolicy(attempts=100, deadline_s=3600)
    attempts = Retrying(policy, LOG, Clock())
    with pytest.raises(ValueError, match="bug"):
        attempts.delay_after(ValueError("a bug"), "test")
    assert attempts.failures == 1


def test_a_daemon_loop_paces_itself_with_the_same_backoff_reset_on_success() -> None:
    backoff = Backoff(initial_s=1.0, maximum_s=4.0, rng=lambda: 1.0)
    assert [backoff.next_delay() for _ in range(4)] == [1.0, 2.0, 4.0, 4.0]
    backoff.reset()
    assert backoff.next_delay() == 1.0
