"""The JSON Pointer -> line mapper behind SARIF regions (tooldir._internal.jsonlines)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tooldir._internal.jsonlines import MAX_POINTERS, escape_token, pointer_lines

DOC = """{
  "name": "x",
  "input_schema": {
    "type": "object",
    "properties": {
      "a/b": {"type": "string"},
      "t~n": {"type": "string"}, "\\u00e9": {}
    }
  },
  "execute": {
    "command": [
      "python3",
      "run.py"
    ]
  },
  "name": "again"
}
"""


ASKED = [
    "",
    "/name",
    "/input_schema/properties/a~1b",
    "/input_schema/properties/a~1b/type",
    "/input_schema/properties/t~0n",
    "/input_schema/properties/é",
    "/execute/command/0",
    "/execute/command/1",
]


def test_members_map_to_their_key_line_and_elements_to_where_they_start() -> None:
    lines = pointer_lines(DOC, ASKED)
    assert lines[""] == 1
    assert lines["/name"] == 2  # a duplicate key keeps its first line
    assert lines["/input_schema/properties/a~1b"] == 6
    assert lines["/input_schema/properties/a~1b/type"] == 6
    assert lines["/input_schema/properties/t~0n"] == 7
    assert lines["/input_schema/properties/é"] == 7  # keys are decoded as the parser decodes them
    assert lines["/execute/command/0"] == 12
    assert lines["/execute/command/1"] == 13


def test_an_unknown_pointer_falls_back_to_its_nearest_ancestor() -> None:
    lines = pointer_lines(DOC, ["/execute/command/7", "/nothing/here", "/execute/command"])
    assert lines["/execute/command/7"] == lines["/execute/command"] == 11
    assert lines["/nothing/here"] == 1
    assert pointer_lines("", ["/x"]) in ({}, {"/x": 1})


def test_only_the_asked_pointers_are_answered_and_not_json_pointers_are_ignored() -> None:
    assert pointer_lines(DOC, ["/execute/command/1", "execute", "/execute/command/1"]) == {"/execute/command/1": 13}
    assert pointer_lines(DOC, []) == {}


def test_at_most_max_pointers_distinct_pointers_per_document_get_a_line() -> None:
    text = json.dumps(list(range(MAX_POINTERS + 5)), indent=1)
    lines = pointer_lines(text, [f"/{i}" for i in range(MAX_POINTERS + 5)])
    assert sorted(lines) == sorted(f"/{i}" for i in range(MAX_POINTERS))
    assert lines["/0"] == 2


def test_a_long_key_over_a_wide_array_costs_only_the_asked_pointers() -> None:
    """The sarif:bomb shape: every-pointer map of this is 20,000 pointers of 50 KB (1 GB);
    the asked pointers are two, so what is kept is two lines."""
    key = "k" * 50_000
    text = json.dumps({"a": 1, key: [0] * 20_000, "z": 2}, indent=1)
    lines = pointer_lines(text, ["/z", f"/{key}/19999"])
    assert lines == {"/z": 20_005, f"/{key}/19999": 20_003}


def test_text_that_is_not_json_keeps_what_was_found_and_never_raises() -> None:
    lines = pointer_lines('{\n "a": 1,\n "b": [tru', ["/a", "/b"])
    assert lines == {"/a": 2, "/b": 3}
    assert pointer_lines("", [""]) in ({}, {"": 1})
    assert pointer_lines("[" * 10_000, ["/0/0"]) == {"/0/0": 1}


def _pointers(value: Any, prefix: str = "") -> list[str]:
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _pointers(item, f"{prefix}/{escape_token(key)}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += _pointers(item, f"{prefix}/{i}")
    return out


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=20,
)


@given(json_values, st.sampled_from([None, 0, 2]))
def test_every_pointer_of_any_document_gets_the_line_where_it_starts(value: Any, indent: int | None) -> None:
    text = json.dumps(value, indent=indent)
    pointers = _pointers(value)
    lines = pointer_lines(text, pointers)
    for pointer in pointers:
        assert pointer in lines
    if indent and isinstance(value, list) and value:
        assert lines["/0"] == 2  # one element per line, starting on the second
