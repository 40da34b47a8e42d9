"""Partials never trail: a stream drops a generation's partials once its answer was sent."""

from __future__ import annotations

from keel_stream.api.sse import SENT_GENERATIONS_KEPT, SentGenerations


def partial(generation: object) -> dict[str, object]:
    return {"tenant": "acme", "session": "s1", "generationId": generation, "delta": "x"}


def test_partials_of_a_generation_are_dropped_after_its_answer_was_sent() -> None:
    sent = SentGenerations()
    assert sent.admits(partial("g1"))
    sent.sent("assistant.message", {"generationId": "g1", "stopReason": "end_turn"})
    assert not sent.admits(partial("g1"))
    assert sent.admits(partial("g2")), "another generation still streams"


def test_only_assistant_messages_close_a_generation() -> None:
    sent = SentGenerations()
    for kind in ("user.message", "tool.result", "run.finished", "compaction"):
        sent.sent(kind, {"generationId": "g1"})
    assert sent.admits(partial("g1"))


def test_partials_and_answers_without_a_string_generation_id_are_left_alone() -> None:
    sent = SentGenerations()
    sent.sent("assistant.message", {"stopReason": "end_turn"})
    sent.sent("assistant.message", {"generationId": 7})
    assert sent.admits(partial(7))
    assert sent.admits({"delta": "x"})


def test_the_remembered_generations_are_bounded_newest_kept() -> None:
    sent = SentGenerations(limit=3)
    for n in range(5):
        sent.sent("assistant.message", {"generationId": f"g{n}"})
    assert [sent.admits(partial(f"g{n}")) for n in range(5)] == [True, True, False, False, False]


def test_a_generation_sent_again_is_refreshed_not_evicted_first() -> None:
    sent = SentGenerations(limit=2)
    sent.sent("assistant.message", {"generationId": "a"})
    sent.sent("assistant.message", {"generationId": "b"})
    sent.sent("assistant.message", {"generationId": "a"})
    sent.sent("assistant.message", {"generationId": "c"})
    assert not sent.admits(partial("a"))
    assert sent.admits(partial("b"))


def test_the_default_bound_is_256() -> None:
    sent = SentGenerations()
    for n in range(SENT_GENERATIONS_KEPT + 1):
        sent.sent("assistant.message", {"generationId": f"g{n}"})
    assert SENT_GENERATIONS_KEPT == 256
    assert sent.admits(partial("g0"))
    assert not sent.admits(partial("g1"))
