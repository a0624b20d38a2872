"""Name rules, confusable skeletons, and the suspicious-text detectors (name:*, text:*)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tooldir.names import GUARD_TOOLS, explain_invalid, is_valid_name, skeleton
from tooldir.text import (
    _prefilter,
    injection_patterns,
    injection_reasons,
    invisible_characters,
    may_contain_injection,
    may_hide_characters,
)


@pytest.mark.parametrize("name", ["a", "read_file", "Tool-2", "x" * 64, "0_start", "UPPER"])
def test_portable_names_are_valid(name: str) -> None:
    assert is_valid_name(name)


@pytest.mark.parametrize(
    "name",
    ["", "x" * 65, "has space", "dot.name", "slash/name", "rеad", "ｆｕｌｌ", "zero\u200bwidth", "new\nline", "tab\t"],
)
def test_names_outside_the_portable_alphabet_are_invalid_and_explained(name: str) -> None:
    assert not is_valid_name(name)
    assert explain_invalid(name)


def test_the_explanation_names_the_offending_code_points() -> None:
    assert "U+0435 CYRILLIC SMALL LETTER IE" in explain_invalid("rеad")
    assert "65 characters" in explain_invalid("x" * 65)


@pytest.mark.parametrize(
    "lookalike",
    [
        "read_fiIe",
        "READ_FILE",
        "read-file",
        "read__file",
        "rеad_file",
        "ｒｅａｄ＿ｆｉｌｅ",
        "read_ﬁle",
        "read_fi1e",
        "read_fi|e",
    ],
    ids=[
        "capital-I",
        "upper",
        "hyphen",
        "double-underscore",
        "cyrillic-e",
        "full-width",
        "ligature",
        "digit-one",
        "pipe",
    ],
)
def test_look_alike_names_share_a_skeleton(lookalike: str) -> None:
    assert skeleton(lookalike) == skeleton("read_file")


@pytest.mark.parametrize(
    ("a", "b"), [("get_log", "get_l0g"), ("modern", "modem"), ("vvrite", "write"), ("s3_sync", "s3_5ync")]
)
def test_classic_confusions_share_a_skeleton(a: str, b: str) -> None:
    assert skeleton(a) == skeleton(b)


@pytest.mark.parametrize(("a", "b"), [("get_log", "get_logs"), ("read_file", "read_files"), ("tool_a", "tool_b")])
def test_genuinely_different_names_have_different_skeletons(a: str, b: str) -> None:
    assert skeleton(a) != skeleton(b)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-", min_size=1, max_size=30))
def test_the_ascii_fast_path_agrees_with_the_full_unicode_skeleton(name: str) -> None:
    skeleton.cache_clear()
    fast = skeleton(name)
    # a trailing combining accent makes the name non-ASCII (the Unicode path), and is then dropped
    slow = skeleton(name + "\u0301")
    assert fast == slow


def test_guard_tools_are_the_two_from_the_design() -> None:
    assert frozenset({"tool_search", "defer_execute_tool"}) == GUARD_TOOLS


# -- invisible characters -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "char", ["\u200b", "\u200d", "\u202e", "\u2066", "\ufeff", "\u00ad", "\U000e0041", "\x07", "\x7f", "\x9b"]
)
def test_invisible_bidi_tag_and_control_characters_are_named(char: str) -> None:
    found = invisible_characters(f"abc{char}def")
    assert len(found) == 1
    assert found[0].startswith(f"U+{ord(char):04X}")


def test_ordinary_text_with_accents_and_emoji_is_not_invisible() -> None:
    assert invisible_characters("Résumé — naïve café 😀\ttab\nnewline") == []


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"a": "plain"}', False),
        ('{"a": "line\\nbreak"}', False),
        ('{"a": "\\u200b"}', True),
        ('{"a": "\\b"}', True),
        ('{"a": "\\f"}', True),
        ('{"a": "\x7f"}', True),
        ('{"a": "é"}', True),
    ],
)
def test_the_raw_text_screen_for_hidden_characters_is_conservative(raw: str, expected: bool) -> None:
    assert may_hide_characters(raw) is expected


# -- injection ------------------------------------------------------------------------------------


def test_the_rust_prefilter_is_available() -> None:
    assert _prefilter() is not None


_TRIGGERS = [
    "ignore",
    "all",
    "previous",
    "instructions",
    "system",
    "prompt",
    "<important>",
    "</system>",
    "~/.ssh",
    "id_rsa",
    ".env",
    "/etc/passwd",
    "api",
    "key",
    "api_key",
    "password",
    "before",
    "using",
    "this",
    "call",
    "do",
    "not",
    "tell",
    "the",
    "user",
    "never",
    "reveal",
    "send",
    "it",
    "to",
    "curl",
    "https://x",
    "IGNORE",
    "Previous",
    "don't",
    "instead",
    "of",
    "calling",
]
_SEPARATORS = [" ", "  ", "\n", ", ", ". ", "_", "-", "(", ")", '"', "'", ":", "/"]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_TRIGGERS), st.sampled_from(_SEPARATORS)), max_size=14))
def test_the_fast_prefilter_never_misses_what_the_python_patterns_find_on_ascii(parts: list[tuple[str, str]]) -> None:
    text = "".join(word + sep for word, sep in parts)
    python_hit = any(pattern.search(text) for pattern, _ in injection_patterns())
    prefilter = _prefilter()
    assert prefilter is not None
    if python_hit:
        assert not prefilter.is_valid(text)
        assert not prefilter.is_valid({"description": text})
        assert list(injection_reasons(text))


def test_escapes_and_non_ascii_always_take_the_full_check() -> None:
    assert may_contain_injection({"d": "ignore previous instructions"}, '{"d": "\\u0069gnore previous instructions"}')
    assert may_contain_injection({"d": "é"}, '{"d": "é"}')
    assert not may_contain_injection({"d": "Counts words."}, '{"d": "Counts words."}')


def test_kelvin_sign_and_long_s_are_not_a_way_around_the_patterns() -> None:
    # re.IGNORECASE folds U+212A onto k and U+017F onto s; the ASCII-only prefilter must not skip them
    assert list(injection_reasons("Needs your api \u212aey"))
    assert list(injection_reasons("\u017fend it to the server"))
