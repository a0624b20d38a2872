"""Tool names: what is valid, and when two names look alike.

A valid name is ASCII ``[A-Za-z0-9_-]{1,64}``: the intersection of what Anthropic, OpenAI and MCP
accept. Two names are *confusable* when their skeletons are equal: case folded, Unicode
compatibility forms folded (full-width letters, ligatures), common look-alikes mapped to one
letter (0/o, 1/l/i, rn/m, vv/w, Cyrillic and Greek homoglyphs) and separators unified.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

_RUNS = re.compile(r"_+")
#: Use with ``fullmatch`` only: Python's ``$`` also matches before a final newline, so
#: ``match``/``search`` would accept "abc\n" (the published schema avoids ``$`` for the same reason).
NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
GUARD_TOOLS = frozenset({"tool_search", "defer_execute_tool"})

# Homoglyphs of ASCII letters that NFKC does not fold (Cyrillic, Greek, and a few others).
_HOMOGLYPHS = str.maketrans(
    {
        "а": "a",
        "в": "b",
        "е": "e",
        "к": "k",
        "м": "m",
        "н": "h",
        "о": "o",
        "р": "p",
        "с": "c",
        "т": "t",
        "у": "y",
        "х": "x",
        "ѕ": "s",
        "і": "i",
        "ј": "j",
        "ԁ": "d",
        "ԛ": "q",
        "ԝ": "w",
        "ӏ": "l",
        "ɡ": "g",
        "α": "a",
        "ο": "o",
        "ρ": "p",
        "ν": "v",
        "ι": "i",
        "κ": "k",
        "τ": "t",
        "υ": "u",
        "χ": "x",
        "ε": "e",
        "ı": "i",
    }
)
_LOOKALIKE = str.maketrans({"0": "o", "1": "l", "i": "l", "|": "l", "5": "s", "-": "_", ".": "_", " ": "_"})


def is_valid_name(name: str) -> bool:
    return NAME_RE.fullmatch(name) is not None


@lru_cache(maxsize=1 << 16)
def skeleton(name: str) -> str:
    """A canonical form under which look-alike names compare equal. Pure, so cached."""
    if name.isascii():  # NFKC, NFKD and the homoglyph table leave ASCII unchanged
        text = name.lower()
    else:
        text = unicodedata.normalize("NFKC", name).casefold().translate(_HOMOGLYPHS)
        text = "".join(ch for ch in unicodedata.normalize("NFKD", text) if not unicodedata.combining(ch))
    text = text.translate(_LOOKALIKE).replace("rn", "m").replace("vv", "w")
    return _RUNS.sub("_", text) if "__" in text else text


def explain_invalid(name: str) -> str:
    if not name:
        return "name is empty"
    if len(name) > 64:
        return f"name is {len(name)} characters; at most 64 are allowed"
    bad = sorted({ch for ch in name if not (ch.isascii() and (ch.isalnum() or ch in "_-"))})
    shown = ", ".join(f"U+{ord(ch):04X} {_char_name(ch)}" for ch in bad[:5])
    return f"name may use only ASCII letters, digits, '_' and '-'; found {shown}"


def _char_name(ch: str) -> str:
    """The Unicode name, or what a nameless character is (control characters have no name)."""
    return unicodedata.name(ch, "") or (
        "control character" if unicodedata.category(ch) == "Cc" else "unnamed character"
    )
