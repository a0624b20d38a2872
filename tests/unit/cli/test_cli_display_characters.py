"""One table of dangerous characters (issue 13 item 5): the CLI's display helper escapes every
character of tooldir.text's table, including the ones its own table missed."""

from __future__ import annotations

import re
import sys

import pytest

from tooldir._cli.common import clean
from tooldir.text import DANGEROUS_CHARACTERS

# the CLI's table before it used tooldir.text's: whatever it escaped must stay escaped
_OLD_CLI = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")


@pytest.mark.parametrize(
    "char", ["\u00ad", "\u061c", "\u115f"], ids=["soft-hyphen", "arabic-letter-mark", "hangul-filler"]
)
def test_the_cli_display_helper_escapes_the_characters_its_old_table_missed(char: str) -> None:
    assert clean(f"a{char}b") == f"a<U+{ord(char):04X}>b"


def test_every_character_the_old_cli_table_escaped_is_still_escaped() -> None:
    old = [chr(cp) for cp in range(0x10000) if _OLD_CLI.match(chr(cp))]
    assert len(old) > 60
    for ch in old:
        assert clean(ch) == f"<U+{ord(ch):04X}>"


def test_every_character_of_the_table_is_escaped_and_tab_and_line_feed_stay() -> None:
    for first, last, _ in DANGEROUS_CHARACTERS:
        for cp in (first, (first + last) // 2, last):
            assert clean(chr(cp)) == f"<U+{cp:04X}>"
    assert clean("a\tb\nc") == "a\tb\nc"
    assert clean("over\rwrite") == "over<U+000D>write"  # a carriage return can overwrite a shown line


def test_ordinary_text_is_shown_unchanged() -> None:
    text = "Résumé — naïve café 😀 中文 ﬁ"
    assert clean(text) == text
    assert clean(None) == ""


def test_the_table_is_sorted_and_its_ranges_do_not_overlap() -> None:
    previous = -1
    for first, last, _ in DANGEROUS_CHARACTERS:
        assert previous < first <= last <= sys.maxunicode
        previous = last
