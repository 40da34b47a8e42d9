from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from keel_stream.kernel import account_inputs


@dataclass(frozen=True)
class E:
    seq: int
    kind: str
    payload: dict[str, Any] = field(default_factory=dict)
    tenant: str = "acme"
    session: str = "s1"


def user(seq: int) -> E:
    return E(seq, "user.message", {"text": f"in {seq}"})


def answer(seq: int, inputs: list[int] | None, stop: str = "end_turn") -> E:
    payload: dict[str, Any] = {"stopReason": stop}
    if inputs is not None:
        payload["inputSeqs"] = inputs
    return E(seq, "assistant.message", payload)


def test_answered_inputs_are_those_in_input_seqs() -> None:
    log = [user(1), user(2), answer(3, [1]), user(4)]
    account = account_inputs(log)
    assert account.unanswered == (2, 4)
    assert not account.owed_turn
    assert account.needs_turn


def test_all_answered_means_nothing_owed() -> None:
    account = account_inputs([user(1), answer(2, [1]), E(3, "run.finished", {"status": "done"})])
    assert account.unanswered == ()
    assert not account.needs_turn


def test_error_and_aborted_answers_do_not_consume_input() -> None:
    for stop in ("error", "aborted"):
        account = account_inputs([user(1), answer(2, [1], stop=stop)])
        assert account.unanswered == (1,)
        assert account.owed_turn


def test_failed_call_after_tool_turn_owes_a_turn() -> None:
    log = [
        user(1),
        answer(2, [1], stop="tool_use"),
        E(3, "tool.result", {"toolCallId": "c"}),
        answer(4, [], stop="error"),
    ]
    account = account_inputs(log)
    assert account.unanswered == ()
    assert account.owed_turn


def test_tool_use_as_latest_answer_owes_a_turn() -> None:
    account = account_inputs([user(1), answer(2, [1], stop="tool_use")])
    assert account.owed_turn


def test_legacy_prefix_is_judged_by_the_watermark() -> None:
    # No assistant carries inputSeqs: everything up to the watermark counts as read.
    log = [user(1), answer(2, None), user(3), user(4)]
    assert account_inputs(log, read_watermark=3).unanswered == (4,)
    assert account_inputs(log, read_watermark=0).unanswered == (1, 3, 4)


def test_input_seqs_decide_from_the_first_tracked_answer() -> None:
    # Inputs 1 and 2 precede the first tracked answer (seq 4): the watermark judges them.
    # Input 5 comes after it: only inputSeqs can answer it, the watermark does not.
    log = [user(1), user(2), answer(3, None), answer(4, [2]), user(5)]
    account = account_inputs(log, read_watermark=5)
    assert account.unanswered == (5,)
    assert account_inputs(log, read_watermark=0).unanswered == (1, 5)
