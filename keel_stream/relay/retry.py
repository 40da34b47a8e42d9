"""Which failures the relay and the projector retry (the policy itself is keel_stream.retry).

A failure is retriable when it is classified transient: a keel error whose `retriable` is true
(the database or the broker unreachable), or a Kafka client error the Kafka seam would translate
into one (keel_stream.kafka.errors), or a failure of the idempotent producer's session (its
producer id, epoch or sequence numbers), which the next producer does not inherit. Anything else
(a query that fails, a record the broker refuses, a bug) is raised at once: retried, it would
fail the same way forever and stall every session behind it. Transient failures are retried
until `deadline_s` of consecutive failures; then the last one is raised too, so the process
exits and its supervisor sees it.
"""

from __future__ import annotations

from typing import Any

from keel_stream.errors import KeelError
from keel_stream.kafka.errors import transient
from keel_stream.retry import RetryPolicy

__all__ = ["is_retriable", "relay_retry"]


def is_retriable(exc: BaseException) -> bool:
    """True for a failure that may pass if the same thing is tried again later."""
    if isinstance(exc, KeelError):
        return exc.retriable
    return transient(exc)  # a client error the Kafka door would translate as retriable


def relay_retry(**fields: Any) -> RetryPolicy:
    """The relay's and the projector's policy: five minutes of consecutive failures, the Kafka
    client's errors classified too (fields: RetryPolicy's, to override)."""
    return RetryPolicy(**{"deadline_s": 300.0, "retriable": is_retriable, **fields})
