"""The faster computations of the scan path give exactly what the computations they replaced give
(issue 14 items 2-3: cut the per-tool cost without changing an answer)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tooldir._internal.strictjson import freeze, loads
from tooldir.deferred.catalog import _SENTENCE_END, SUMMARY_CHARS, ToolDef, _visible, summary
from tooldir.deferred.tokenbounds import _SEGMENT, segments, token_lower_bound
from tooldir.deferred.tokens import CHARS_PER_TOKEN, compact_json
from tooldir.model import Risk


def _old_token_lower_bound(text: str) -> int:
    """The loop that stopped at the estimate (before issue 14's pipeline pass)."""
    if not text:
        return 0
    estimate = max(1, round(len(text) / CHARS_PER_TOKEN))
    runs = 0
    for _ in _SEGMENT.finditer(text):
        runs += 1
        if runs >= estimate:
            break
    return min(runs, estimate)


_CHARS = st.sampled_from([*"aZs'tdlmrev09 _-.,:;\"/\\{}[]\n\t", "é", "字", "\U0001f600", "\u00a0", "’"])


@settings(max_examples=500, deadline=None)
@given(st.lists(_CHARS, max_size=200).map("".join))
def test_the_token_lower_bound_equals_the_early_stopping_loop_it_replaced(text: str) -> None:
    assert token_lower_bound(text) == _old_token_lower_bound(text)


@settings(max_examples=500, deadline=None)
@given(st.lists(_CHARS, max_size=200).map("".join) | st.text(max_size=200))
def test_counting_segments_on_translated_bytes_equals_counting_the_segment_matches(text: str) -> None:
    assert segments(text) == len(_SEGMENT.findall(text))


def test_segments_are_counted_for_every_ascii_byte_and_for_lone_surrogates() -> None:
    for code in range(128):
        ch = chr(code)
        for text in (ch, f"a{ch}b", f"{ch}a", f"a{ch}", f"\ud800{ch}1\udfff"):
            assert segments(text) == len(_SEGMENT.findall(text)), repr(text)


def _old_summary(description: str, limit: int = SUMMARY_CHARS) -> str:
    """The directory summary before the printable-ASCII fast path and the sentence end by find."""
    text = " ".join(_visible(description[: limit * 4]).split())
    first = _SENTENCE_END.split(text, maxsplit=1)[0]
    if len(first) > limit:
        cut = first[: limit - 1].rsplit(" ", 1)[0] if " " in first[: limit - 1] else first[: limit - 1]
        first = cut.rstrip(",;:") + "…"
    return first


_SUMMARY_CHARS = st.sampled_from(
    [*"ab .!?,;:\t\n\r\x0b\x0c\x1c\x00\x7f", "\x85", "\u00a0", "\u2028", "\u3000", "\u200b", "\u202e", "é", "…"]
)


@settings(max_examples=500, deadline=None)
@given(st.lists(_SUMMARY_CHARS, max_size=300).map("".join) | st.text(max_size=300))
def test_the_directory_summary_equals_the_regex_summary_it_replaced(description: str) -> None:
    assert summary(description) == _old_summary(description)
    assert summary(description, 8) == _old_summary(description, 8)


_JSON: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=20), st.text(max_size=40), st.dictionaries(st.text(max_size=8), _JSON, max_size=5))
def test_the_compact_anthropic_text_of_a_frozen_definition_equals_the_text_of_its_thawed_copy(
    name: str, description: str, schema: dict[str, Any]
) -> None:
    for frozen in (freeze(schema), schema):
        d = ToolDef(name, description, frozen, Risk.READ)
        assert d.anthropic_compact_json() == compact_json(d.anthropic())


def test_the_compact_anthropic_text_of_a_strictly_parsed_schema_equals_the_text_of_its_thawed_copy() -> None:
    text = (
        '{"type":"object","properties":{"q":{"type":"string","enum":["a","é"]},"n":{"type":"number"}},"required":["q"]}'
    )
    for freeze_arrays in (True, False):
        d = ToolDef("t", "d", loads(text.encode(), freeze_arrays=freeze_arrays), Risk.EXEC)
        assert d.anthropic_compact_json() == compact_json(d.anthropic())
        assert json.loads(d.anthropic_compact_json()) == d.anthropic()
