"""What the worker commits always fits in one event: long tool output and answer text are cut
visibly, and tool-call arguments JSON cannot hold become an error the model sees."""

from __future__ import annotations

import math

import orjson
import pytest

from keel_stream.kernel.limits import check_event_size
from keel_stream.worker.answers import _call_block
from keel_stream.worker.output_bounds import TEXT_MAX_BYTES, bounded_text
from keel_stream.worker.providers.base import ToolCall


def test_short_text_is_kept_as_it_is() -> None:
    assert bounded_text("hello") == "hello"


@pytest.mark.parametrize("unit", ["x", "é", "\x01", "🙂"])
def test_long_text_is_cut_to_fit_with_a_note(unit: str) -> None:
    text = unit * (TEXT_MAX_BYTES + 10)
    cut = bounded_text(text)
    assert len(orjson.dumps(cut)) <= TEXT_MAX_BYTES
    assert cut.startswith(unit * 100)
    assert "[output cut:" in cut
    check_event_size({"toolCallId": "c1", "content": [{"type": "text", "text": cut}]})


def test_arguments_json_cannot_hold_become_invalid_arguments() -> None:
    block = _call_block(ToolCall(id="c1", name="sleep", arguments={"seconds": math.nan}), "f")
    assert block["arguments"] == {}
    assert "NaN" in block["invalidArguments"]
    orjson.dumps(block)


def test_arguments_larger_than_an_event_can_hold_become_invalid_arguments() -> None:
    huge = {"text": "x" * (TEXT_MAX_BYTES + 1)}
    block = _call_block(ToolCall(id="c1", name="echo", arguments=huge), "f")
    assert block["arguments"] == {}
    assert "bytes" in block["invalidArguments"]


def test_good_arguments_are_kept() -> None:
    block = _call_block(ToolCall(id="c1", name="echo", arguments={"a": [1, 2.5, "x"]}), "f")
    assert block == {
        "type": "toolCall",
        "id": "c1",
        "name": "echo",
        "arguments": {"a": [1, 2.5, "x"]},
    }
