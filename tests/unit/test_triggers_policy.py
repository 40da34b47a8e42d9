"""The overlap decision, the firing's keys and message (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from keel_stream.triggers.policy import (
    Plan,
    decide,
    expansion_bound,
    message_payload,
    new_session_id,
    render,
    request_id,
)


def test_an_idle_target_is_fired_with_the_inputs_own_delivery() -> None:
    for overlap in ("skip", "buffer_one", "queue", "guide", "cancel_other"):
        assert decide(overlap, False, False, "guide") == Plan("fire", "idle", "guide")


@pytest.mark.parametrize(
    ("overlap", "buffered", "plan"),
    [
        ("skip", False, Plan("skip", "busy", None, "skipped")),
        ("buffer_one", False, Plan("buffer", "busy", "queue")),
        ("buffer_one", True, Plan("skip", "coalesced", None, "skipped")),
        ("queue", False, Plan("fire", "busy", "queue")),
        ("guide", False, Plan("fire", "busy", "guide")),
        ("cancel_other", False, Plan("cancel_other", "busy", "queue")),
    ],
)
def test_a_busy_target_follows_the_overlap_policy(overlap: str, buffered: bool, plan: Plan) -> None:
    assert decide(overlap, True, buffered, "queue") == plan


def test_keys_sessions_and_the_message_are_derived_from_trigger_and_key() -> None:
    nominal = datetime(2026, 5, 1, 12, tzinfo=UTC)
    key = "2026-05-01T12:00:00.000Z"
    assert request_id("tr_ab", key) == "trigger:tr_ab:2026-05-01T12:00:00.000Z"
    assert new_session_id("tr_ab", key, True) == "tr_ab-2026-05-01T12:00:00.000Z"
    hashed = new_session_id("tr_ab", "any/thing with spaces", False)
    assert hashed.startswith("tr_ab-d-")
    assert len(hashed) == len("tr_ab-d-") + 32
    assert render(
        "at {{nominalTime}} by {{trigger}} {{other}}", {"trigger": "t", "nominalTime": key}
    ) == (f"at {key} by t {{{{other}}}}")
    payload = message_payload("tr_ab", key, nominal, 7, "hi", "guide")
    assert payload == {
        "text": "hi",
        "requestId": "trigger:tr_ab:2026-05-01T12:00:00.000Z",
        "source": {"trigger": "tr_ab", "nominalTime": key, "firingId": 7},
        "delivery": "guide",
    }
    assert "delivery" not in message_payload("tr_ab", key, nominal, 7, "hi", "queue")


def test_a_value_is_inserted_once_and_never_read_as_template_syntax() -> None:
    values = {"deliveryId": "{{body}}" * 3, "body": "B{{deliveryId}}"}
    assert render("{{deliveryId}}|{{body}}", values) == "{{body}}{{body}}{{body}}|B{{deliveryId}}"


def test_the_expansion_bound_counts_each_placeholder_at_its_widest() -> None:
    widths = {"body": 1000, "deliveryId": 10}
    assert expansion_bound("x{{body}}y{{body}}{{deliveryId}}{{other}}", widths) == (
        len("xy{{other}}") + 2000 + 10
    )
