"""Tool output uses tooldir.text's table (issue 13 item 5): what was stripped is still stripped,
plus the bidi marks and tag characters the old table missed; emoji joiners stay."""

from __future__ import annotations

import re

import pytest

from tooldir.sandbox.output import sanitize_text

_OLD_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_OLD_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")


def test_every_character_the_old_output_tables_removed_is_still_removed() -> None:
    old = [chr(cp) for cp in range(0x3000) if _OLD_CONTROLS.match(chr(cp)) or _OLD_BIDI.match(chr(cp))]
    assert len(old) > 60
    for ch in old:
        assert sanitize_text(f"a{ch}") == "a", f"U+{ord(ch):04X}"  # (ESC b would be a sequence)


@pytest.mark.parametrize("char", ["\u061c", "\u200e", "\u200f", "\U000e0041", "\U000e007f"])
def test_bidi_marks_and_tag_characters_are_removed_from_tool_output(char: str) -> None:
    assert sanitize_text(f"a{char}b") == "ab"


def test_emoji_joiners_and_variation_selectors_stay_in_tool_output() -> None:
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467 \u2764\ufe0f"
    assert sanitize_text(family) == family
