from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from keel_stream.kernel import canonical_json, payload_digest, same_payload

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)


def test_key_order_and_whitespace_do_not_matter() -> None:
    a = json.loads('{"b": 1, "a": {"y": [1, 2], "x": "s"}}')
    b = json.loads('{"a":{"x":"s","y":[1,2]},"b":1}')
    assert same_payload(a, b)
    assert payload_digest(a) == payload_digest(b)


def test_integral_float_equals_integer() -> None:
    assert same_payload({"n": 1}, {"n": 1.0})
    assert not same_payload({"n": 1}, {"n": 1.5})


def test_different_values_differ() -> None:
    assert not same_payload({"a": [1, 2]}, {"a": [2, 1]})
    assert not same_payload({"a": "1"}, {"a": 1})
    assert not same_payload({"a": None}, {})


def test_canonical_form_is_compact_and_sorted() -> None:
    assert canonical_json({"b": 1, "a": [True, None]}) == b'{"a":[true,null],"b":1}'


@given(st.dictionaries(st.text(max_size=5), json_values, max_size=6))
def test_reserialised_document_is_the_same_payload(doc: dict[str, object]) -> None:
    reordered = json.loads(json.dumps(dict(reversed(list(doc.items()))), indent=3))
    assert same_payload(doc, reordered)
