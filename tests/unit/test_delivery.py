from __future__ import annotations

import pytest

from keel_stream.kernel import Delivery, effective_delivery, with_effective_delivery


@pytest.mark.parametrize(
    ("requested", "active", "expected"),
    [
        (None, False, Delivery.QUEUE),
        (None, True, Delivery.QUEUE),
        (Delivery.QUEUE, True, Delivery.QUEUE),
        (Delivery.GUIDE, True, Delivery.GUIDE),
        (Delivery.GUIDE, False, Delivery.QUEUE),
    ],
)
def test_effective_delivery(requested: Delivery | None, active: bool, expected: Delivery) -> None:
    assert effective_delivery(requested, active) is expected


def test_degraded_guide_is_written_as_queue() -> None:
    assert with_effective_delivery({"text": "x", "delivery": "guide"}, False) == {
        "text": "x",
        "delivery": "queue",
    }


def test_honoured_guide_and_absent_delivery_are_written_unchanged() -> None:
    assert with_effective_delivery({"delivery": "guide"}, True) == {"delivery": "guide"}
    assert with_effective_delivery({"text": "x"}, False) == {"text": "x"}
