from __future__ import annotations

import keel_stream.errors as errors_module
from keel_stream.errors import (
    BrokerUnavailable,
    KeelError,
    ProjectionBehind,
    RateLimited,
    StoreUnavailable,
    TenantBusy,
)


def _error_classes() -> list[type[KeelError]]:
    return [
        obj
        for obj in vars(errors_module).values()
        if isinstance(obj, type) and issubclass(obj, KeelError)
    ]


def test_every_error_has_its_own_code() -> None:
    codes = [cls.code for cls in _error_classes()]
    assert len(codes) == len(set(codes))


def test_every_error_is_documented_in_the_tree() -> None:
    doc = errors_module.__doc__ or ""
    for cls in _error_classes():
        assert cls.__name__ in doc, cls.__name__


def test_only_transient_errors_are_retriable() -> None:
    # A tenant's rate or concurrency bound passes with time (Retry-After), so it is transient too.
    retriable = {cls for cls in _error_classes() if cls.retriable}
    assert retriable == {
        StoreUnavailable,
        ProjectionBehind,
        BrokerUnavailable,
        RateLimited,
        TenantBusy,
    }
