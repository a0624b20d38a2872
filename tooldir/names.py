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
# The tool-name rule, the one definition: the model (tooldir.model.ToolName), the published
# manifest schema (generated from the model) and every check here are built from these.
NAME_MAX_LENGTH = 64
#: The characters a name may use, as the body of a regex class.
NAME_CHARS = "A-Za-z0-9_-"
#: One character a name may not use. Schemas say ``not: {pattern: NAME_FORBIDDEN}`` plus
#: ``minLength``/``maxLength``, never an anchored pattern: engines disagree whether ``$`` matches
#: before a final newline (Python's does, so ``match``/``search`` with ``$`` would accept "abc\n").
NAME_FORBIDDEN = f"[^{NAME_CHARS}]"
_FORBIDDEN_RE = re.compile(NAME_FORBIDDEN)
#: Use with ``fullmatch`` only (it has no anchors).
NAME_RE = re.compile(f"[{NAME_CHARS}]{{1,{NAME_MAX_LENGTH}}}")
#: The name rule as JSON Schema (2020-12), for the published manifest schema.
NAME_JSON_SCHEMA: dict[str, object] = {
    "$comment": f"1-{NAME_MAX_LENGTH} of A-Z a-z 0-9 _ -. No regex '$': engines disagree whether it "
    "matches before a final newline.",
    "minLength": 1,
    "maxLength": NAME_MAX_LENGTH,
    "not": {"pattern": NAME_FORBIDDEN},
}
SEPARATOR = "__"
"""Between a server package's name and its tool's in an upstream MCP tool's name: ``<package>__<tool>``."""

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
    if len(name) > NAME_MAX_LENGTH:
        return f"name is {len(name)} characters; at most {NAME_MAX_LENGTH} are allowed"
    bad = sorted(set(_FORBIDDEN_RE.findall(name)))
    shown = ", ".join(f"U+{ord(ch):04X} {_char_name(ch)}" for ch in bad[:5])
    return f"name may use only ASCII letters, digits, '_' and '-'; found {shown}"


def _char_name(ch: str) -> str:
    """The Unicode name, or what a nameless character is (control characters have no name)."""
    return unicodedata.name(ch, "") or (
        "control character" if unicodedata.category(ch) == "Cc" else "unnamed character"
    )


_GLOB_SPECIAL = frozenset("*?[")
#: What a class in a glob can match in a tool name (names are ASCII ``[A-Za-z0-9_-]``).
_NAME_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
_NEVER = "\x00"  # no skeleton contains NUL: a class that can match nothing


def _glob_tokens(pattern: str) -> list[tuple[str, str]]:
    """Split an ``fnmatch`` glob into ("lit", text), ("any", "*"), ("one", "?"), ("class", "[...]")
    tokens, with fnmatch's rules: ``[!...]`` negates, a ``]`` right after ``[`` or ``[!`` is a
    member, and a ``[`` without a closing ``]`` is a literal."""
    tokens: list[tuple[str, str]] = []
    literal: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch in "*?":
            if literal:
                tokens.append(("lit", "".join(literal)))
                literal = []
            tokens.append(("any", "*") if ch == "*" else ("one", "?"))
            i += 1
            continue
        if ch == "[":
            j = i + 1
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            j = pattern.find("]", j)
            if j >= 0:
                if literal:
                    tokens.append(("lit", "".join(literal)))
                    literal = []
                tokens.append(("class", pattern[i : j + 1]))
                i = j + 1
                continue
        literal.append(ch)
        i += 1
    if literal:
        tokens.append(("lit", "".join(literal)))
    return tokens


def _escape_glob(text: str) -> str:
    return "".join(f"[{ch}]" if ch in _GLOB_SPECIAL else ch for ch in text)


@lru_cache(maxsize=4096)
def skeleton_pattern(pattern: str) -> str:
    """The glob that matches the :func:`skeleton` of every name ``pattern`` is about.

    Literal parts become their skeleton; ``*`` and ``?`` stay; a ``[...]`` class becomes the class
    of the skeletons of every name character it matches (so ``[A-Z]`` also covers ``0``'s and
    ``1``'s look-alikes ``o`` and ``l``). Used to make ``deny`` rules catch look-alike spellings:
    ``fnmatchcase(skeleton(name), skeleton_pattern(p))``. It errs on the broad side, which is what
    a deny rule wants and why no ``allow`` rule uses it.
    """
    import fnmatch

    out: list[str] = []
    for kind, text in _glob_tokens(pattern):
        if kind == "lit":
            out.append(_escape_glob(skeleton(text)))
        elif kind == "class":
            members = sorted({skeleton(ch) for ch in _NAME_ALPHABET if fnmatch.fnmatchcase(ch, text)})
            members = [m for m in members if len(m) == 1]
            if not members:
                out.append(_NEVER)
            else:
                # ']' first, '-' last and '!' not first keep every member literal inside the class
                body = "".join(sorted(members, key=lambda m: (m != "]", m == "-", m == "!", m)))
                out.append(f"[{body}]")
        else:
            out.append(text)
    return "".join(out)
