"""Text the model or the reviewer will read: the one table of dangerous characters, and the
checks of every string of a manifest.

Control characters (they can rewrite what a terminal shows) are an error, ``control-character``;
invisible characters and injection-like instructions are warnings, ``suspicious-text``: a reviewer
must see them in full before approving.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

import jsonschema_rs

from ._internal.strictjson import escape_pointer

# ---------------------------------------------------------------------------------------------
# The one table of dangerous characters. Every place that screens, strips or escapes text uses it
# (validation here, tool output in sandbox/output.py, the terminal in _cli/common.py, the
# model-facing directory in catalog.py), each picking the kinds it needs.

CONTROL = "control"
"""C0 controls except tab, LF and CR; DEL; C1 controls. ESC and CSI (U+009B) start terminal
escape sequences: in a manifest they can rewrite what a reviewer sees at approval."""
BIDI = "bidi"
"""Bidirectional formatting: marks, embeddings, overrides, isolates (Trojan Source)."""
TAG = "tag"
"""Tag characters (U+E0000..U+E007F): invisible ASCII look-alikes that models still read."""
INVISIBLE = "invisible"
"""Everything else that renders as nothing: zero-width characters, joiners, fillers, variation
selectors, the BOM, interlinear annotation, invisible musical format characters."""

DANGEROUS_CHARACTERS: tuple[tuple[int, int, str], ...] = (
    (0x0000, 0x0008, CONTROL),
    (0x000B, 0x000C, CONTROL),
    (0x000E, 0x001F, CONTROL),
    (0x007F, 0x009F, CONTROL),
    (0x00AD, 0x00AD, INVISIBLE),  # soft hyphen
    (0x034F, 0x034F, INVISIBLE),  # combining grapheme joiner
    (0x061C, 0x061C, BIDI),  # Arabic letter mark
    (0x115F, 0x1160, INVISIBLE),  # Hangul choseong/jungseong fillers
    (0x17B4, 0x17B5, INVISIBLE),  # Khmer inherent vowels
    (0x180B, 0x180F, INVISIBLE),  # Mongolian variation selectors, vowel separator
    (0x200B, 0x200D, INVISIBLE),  # zero width space, non-joiner, joiner
    (0x200E, 0x200F, BIDI),  # LRM, RLM
    (0x202A, 0x202E, BIDI),  # embeddings and overrides
    (0x2060, 0x2065, INVISIBLE),  # word joiner, invisible operators
    (0x2066, 0x2069, BIDI),  # isolates
    (0x206A, 0x206F, INVISIBLE),  # deprecated format characters
    (0x3164, 0x3164, INVISIBLE),  # Hangul filler
    (0xFE00, 0xFE0F, INVISIBLE),  # variation selectors
    (0xFEFF, 0xFEFF, INVISIBLE),  # zero width no-break space (BOM)
    (0xFFA0, 0xFFA0, INVISIBLE),  # halfwidth Hangul filler
    (0xFFF9, 0xFFFB, INVISIBLE),  # interlinear annotation
    (0x1D173, 0x1D17A, INVISIBLE),  # musical symbol format characters
    (0xE0000, 0xE007F, TAG),
    (0xE0100, 0xE01EF, INVISIBLE),  # variation selectors supplement
)
"""(first, last, kind) code point ranges, in order."""

ALL_KINDS = (CONTROL, BIDI, TAG, INVISIBLE)


def _code_point(value: int) -> str:
    return f"\\x{value:02x}" if value < 0x100 else f"\\u{value:04x}" if value < 0x10000 else f"\\U{value:08x}"


@cache
def character_class(kinds: tuple[str, ...] = ALL_KINDS, extra: str = "") -> str:
    """A regex character class (``[...]``) of the table's ranges of ``kinds``, plus the literal
    characters ``extra`` (for example ``"\\r"`` where a carriage return must go too)."""
    unknown = set(kinds) - set(ALL_KINDS)
    if unknown:
        raise ValueError(f"unknown character kinds: {sorted(unknown)}")
    ranges = [
        _code_point(first) if first == last else f"{_code_point(first)}-{_code_point(last)}"
        for first, last, kind in DANGEROUS_CHARACTERS
        if kind in kinds
    ]
    return "[" + "".join(ranges) + "".join(_code_point(ord(ch)) for ch in extra) + "]"


def kind_of(ch: str) -> str | None:
    """The table's kind of one character, or None when it is not in the table."""
    cp = ord(ch)
    for first, last, kind in DANGEROUS_CHARACTERS:
        if first <= cp <= last:
            return kind
    return None


# the ISO 6429 abbreviations of the C0 and C1 controls (which have no Unicode character names)
_C0 = (
    "NUL SOH STX ETX EOT ENQ ACK BEL BS HT LF VT FF CR SO SI DLE DC1 DC2 DC3 DC4 NAK SYN ETB CAN EM SUB ESC FS GS RS US"
)
_C1 = "PAD HOP BPH NBH IND NEL SSA ESA HTS HTJ VTS PLD PLU RI SS2 SS3 DCS PU1 PU2 STS CCH MW SPA EPA SOS SGC SCI CSI ST OSC PM APC"
_CONTROL_NAMES = dict(zip([*range(0x20), *range(0x80, 0xA0)], (_C0 + " " + _C1).split(), strict=True)) | {0x7F: "DEL"}


def describe_character(ch: str) -> str:
    """``U+200B ZERO WIDTH SPACE``; a control by its abbreviation, ``U+001B ESC``."""
    cp = ord(ch)
    if cp in _CONTROL_NAMES:
        return f"U+{cp:04X} {_CONTROL_NAMES[cp]}"
    return f"U+{cp:04X} {unicodedata.name(ch, 'UNNAMED')}"


_DANGEROUS = re.compile(character_class())
_CONTROL = re.compile(character_class((CONTROL,)))
_HIDDEN = re.compile(character_class((BIDI, TAG, INVISIBLE)))


# (reason, pattern). Each pattern is written so Python's ``re`` (with IGNORECASE) and the Rust
# engine of jsonschema-rs (with ``(?i)``) read it the same way on ASCII text: no ``.`` (``[\s\S]``
# instead), no flags other than case. The Rust form is only a pre-filter (see ``_prefilter``).
_INJECTION_SOURCES = (
    ("asks to ignore instructions", r"\bignore\b[\s\S]{0,40}\b(instructions|previous|above|prior|system)\b"),
    ("mentions the system prompt", r"\b(system prompt|developer message)\b"),
    ("contains instruction-like tags", r"<\s*/?\s*(important|system|instructions?)\s*>"),
    ("names secret files", r"(~/\.ssh|id_rsa|id_ed25519|\.aws/credentials|\.netrc|\.env\b|/etc/passwd|/etc/shadow)"),
    (
        "talks about secrets",
        r"\b(api[ _-]?keys?|secret keys?|passwords?|private keys?|access tokens?|credentials)\b",
    ),
    (
        "tells the model to call other tools",
        r"\b(before|after|instead of) (using|calling|running) (this|any|the|other)\b[\s\S]{0,60}\b(call|use|run|read|send)\b",
    ),
    (
        "asks to hide things from the user",
        r"\b(do not|don't|never) (tell|inform|mention|show|reveal)\b[\s\S]{0,30}\b(user|human)\b",
    ),
    (
        "asks to send data elsewhere",
        r"\b(exfiltrate|send (it|them|this|the contents?) to|upload (it|them) to|curl\s+https?://)",
    ),
)


@cache
def injection_patterns() -> tuple[tuple[re.Pattern[str], str], ...]:
    """(Python pattern, reason) of every injection pattern, compiled on first use (~3 ms): text
    that the Rust pre-filter clears, the common case, never needs them."""
    return tuple((re.compile(source, re.I), reason) for reason, source in _INJECTION_SOURCES)


def _injection_union() -> str:
    """Every injection pattern as one case-insensitive regex, for jsonschema-rs's ``pattern``."""
    return "(?i)" + "|".join(f"(?:{source})" for _, source in _INJECTION_SOURCES)


@cache
def _injection_any() -> re.Pattern[str]:
    """One regex for "does any pattern match" (Python's reading; used only without the Rust engine)."""
    return re.compile("|".join(f"(?:{source})" for _, source in _INJECTION_SOURCES), re.I)


#: Top-level manifest members the model never reads: only controls and invisible characters are
#: looked for there (an env variable named API_KEY is a declaration, not an instruction).
NOT_MODEL_FACING = frozenset({"execute", "server"})  # server: of server.json (DESIGN §10)


def clean_strings_schema() -> dict[str, Any]:
    """A JSON Schema, to be placed at ``#/$defs/clean``, that accepts a value when no string in it
    (at any depth, object keys included) matches an injection pattern. See :func:`_prefilter`
    for when this is sound."""
    union = _injection_union()
    return {
        "if": {"type": "string"},
        "then": {"not": {"pattern": union}},
        "propertyNames": {"not": {"pattern": union}},
        "items": {"$ref": "#/$defs/clean"},
        "additionalProperties": {"$ref": "#/$defs/clean"},
    }


@cache
def _prefilter() -> Any:
    """A compiled jsonschema-rs validator that accepts a JSON value when no string in it matches
    any injection pattern. Rust's regex engine scans a whole manifest in microseconds where eight
    Python regexes over every string cost hundreds. Sound on ASCII text only: there Python
    and ECMA/Rust agree on ``\\b``, ``\\s`` and case folding. None if it cannot be built."""
    schema = {"$defs": {"clean": clean_strings_schema()}, "$ref": "#/$defs/clean"}
    # Every string is checked (execute too): a superset, so the filter stays sound.
    try:
        return jsonschema_rs.Draft202012Validator(schema)
    except (ValueError, jsonschema_rs.ReferencingError):  # pragma: no cover - depends on the engine
        return None


def invisible_characters(text: str) -> list[str]:
    """Names of the table's characters in ``text`` (invisible, bidi, tag and control ones)."""
    return [describe_character(m.group()) for m in _DANGEROUS.finditer(text)]


def injection_reasons(text: str) -> Iterator[str]:
    """Why ``text`` reads like an instruction to the model (one reason per matching pattern)."""
    if not _may_be_injection(text):
        return
    for pattern, reason in injection_patterns():
        match = pattern.search(text)
        if match:
            yield f"{reason}: {match.group()!r}"


def _may_be_injection(text: str) -> bool:
    """One regex pass: may an injection pattern match ``text``? Never a false "no"; a "yes" is
    confirmed by the Python patterns. Rust's engine reads the ASCII stand-in of the text
    (:class:`_AsciiStandIn`), ~100x faster than Python's ``re`` over an 8-way alternation."""
    fast = _prefilter()
    if fast is None:
        return _injection_any().search(text) is not None
    return not fast.is_valid(text if text.isascii() else _NON_ASCII.sub(_stand_in, text))


def _stand_in(match: re.Match[str]) -> str:
    return match.group().translate(_STAND_IN)


class _AsciiStandIn(dict[int, str]):
    """``str.translate`` table: each non-ASCII character becomes one ASCII character that every
    injection pattern (Python ``re``, IGNORECASE) treats the same way, so a match in the text is
    a match in its stand-in, of the same length:

    - a letter that IGNORECASE folds onto an ASCII letter becomes that letter (U+212A KELVIN
      SIGN -> ``k``, U+017F LONG S -> ``s``, U+0130/U+0131 -> ``i``);
    - other word characters (what ``\\w`` matches) become ``x``;
    - whitespace (``\\s``) becomes a space; anything else ``#``.

    The patterns name no non-ASCII character and ``[\\s\\S]`` matches anything, so only these
    three properties matter. Filled lazily (bounded), since few distinct characters occur."""

    _LIMIT = 1 << 16

    def __missing__(self, code_point: int) -> str:
        ch = chr(code_point)
        if _ASCII_LETTER_I.fullmatch(ch):
            out = next(letter for letter in "abcdefghijklmnopqrstuvwxyz" if re.fullmatch(letter, ch, re.I))
        elif _WORD.fullmatch(ch):
            out = "x"
        elif _SPACE.fullmatch(ch):
            out = " "
        else:
            out = "#"
        if len(self) < self._LIMIT:
            self[code_point] = out
        return out


_ASCII_LETTER_I = re.compile("[a-z]", re.I)
_WORD = re.compile(r"\w")
_SPACE = re.compile(r"\s")
_STAND_IN = _AsciiStandIn()
_NON_ASCII = re.compile("[^\x00-\x7f]+")


def may_hide_characters(raw_json: str) -> bool:
    """False only when no string of the JSON document ``raw_json`` can hold an invisible or
    control character: ASCII, no DEL, and no escape that could encode one."""
    if not raw_json.isascii() or "\x7f" in raw_json:
        return True
    return "\\" in raw_json and ("\\u" in raw_json or "\\b" in raw_json or "\\f" in raw_json)


def plainly_clean(value: Any, raw_json: str) -> bool:
    """True only when :func:`check_strings` would find nothing in ``value`` (parsed from
    ``raw_json``): plain ASCII, no escape that could hide a character, and no injection pattern
    anywhere. Without any backslash every string appears verbatim in the raw text, so one Rust
    scan of that text is a sound superset of scanning each string (the patterns have no anchors,
    and the quotes around a string are non-word characters like its ends)."""
    if may_hide_characters(raw_json):
        return False
    fast = _prefilter()
    if fast is None:
        return False
    return bool(fast.is_valid(raw_json if "\\" not in raw_json else value))


def may_contain_injection(value: Any, raw_json: str) -> bool:
    """False only when no string in ``value`` (parsed from the JSON text ``raw_json``), object keys
    included, can match an injection pattern. Conservative: non-ASCII text or ``\\u`` escapes
    always answer True."""
    if not raw_json.isascii() or ("\\" in raw_json and "\\u" in raw_json):
        return True
    fast = _prefilter()
    return fast is None or not fast.is_valid(value)


# ---------------------------------------------------------------------------------------------
# Every string of a manifest


@dataclass(frozen=True, slots=True)
class TextFinding:
    """One problem in one string (a value or an object key) of a JSON document.

    ``kind``: ``"control"`` (control characters: an error, ``control-character``), ``"hidden"``
    (invisible, bidi or tag characters) or ``"injection"`` (both ``suspicious-text`` warnings).
    ``pointer`` is the JSON Pointer of the value, or of the member whose key it is."""

    kind: Literal["control", "hidden", "injection"]
    pointer: str
    detail: str


@dataclass(frozen=True, slots=True)
class TextReport:
    """What :func:`check_strings` found: ``findings`` in document order, at most ``limit`` of each
    kind; ``omitted`` counts the further strings of each kind (counted, not located)."""

    findings: tuple[TextFinding, ...] = ()
    omitted: Mapping[str, int] = field(default_factory=dict)


def check_strings(value: Any, raw_json: str, *, limit: int | None = None) -> TextReport:
    """Every control character, invisible character and injection-like text in any string of the
    manifest ``value`` parsed from ``raw_json``, keys included, at any depth, in document order.
    Injection is not looked for under :data:`NOT_MODEL_FACING` members.

    Whole-document screens first, each one pass of Rust's regex engine (or a test of the raw
    text): a manifest without findings is walked at most once, to collect its strings, and a
    pointer is built only for a string that has a finding. Past ``limit`` findings of a kind,
    strings are only counted (a huge hostile manifest costs regex passes, not diagnostics)."""
    chars = may_hide_characters(raw_json) and _may_have_dangerous(value)
    injection = may_contain_injection(value, raw_json)
    if injection and isinstance(value, dict):
        injection = _may_any_be_injection(_model_facing_strings(value))
    if not (chars or injection):
        return TextReport()
    found: list[TextFinding] = []
    counts = {"control": 0, "hidden": 0, "injection": 0}
    cap = limit if limit is not None else len(raw_json) + 1
    dangerous, control, hidden = _DANGEROUS.search, _CONTROL.search, _HIDDEN.search
    for text, parent, token, model_facing in _leaves(value):
        if chars and dangerous(text):
            if counts["control"] < cap or counts["hidden"] < cap:
                for finding in _characters(text, _pointer(parent, token)):
                    counts[finding.kind] += 1
                    if counts[finding.kind] <= cap:
                        found.append(finding)
            else:
                counts["control"] += control(text) is not None
                counts["hidden"] += hidden(text) is not None
        if injection and model_facing and _may_be_injection(text):
            counts["injection"] += 1
            if counts["injection"] <= cap:
                reasons = "; ".join(injection_reasons(text))
                found.append(TextFinding("injection", _pointer(parent, token), reasons))
    omitted = {kind: count - cap for kind, count in counts.items() if count > cap}
    return TextReport(tuple(found), omitted)


#: (text, pointer of the containing object or array, key or index, model-facing)
_Leaf = tuple[str, str, str | int | None, bool]


def _leaves(value: Any) -> list[_Leaf]:
    """Every string of ``value`` (an object's key, then its value) in document order."""
    leaves: list[_Leaf] = []
    # (node, pointer of its parent, its key or index, model-facing); popped in document order
    stack: list[tuple[Any, str, str | int | None, bool]] = [(value, "", None, True)]
    while stack:
        node, parent, token, facing = stack.pop()
        if isinstance(node, str):
            leaves.append((node, parent, token, facing))
            continue
        pointer = _pointer(parent, token)
        children: list[tuple[Any, str, str | int | None, bool]] = []
        if isinstance(node, dict):
            top = token is None
            for key, item in node.items():
                member_facing = facing and not (top and key in NOT_MODEL_FACING)
                children.append((key, pointer, key, member_facing))
                if isinstance(item, str | dict | list):
                    children.append((item, pointer, key, member_facing))
        elif isinstance(node, list):
            children = [
                (item, pointer, i, facing) for i, item in enumerate(node) if isinstance(item, str | dict | list)
            ]
        stack.extend(reversed(children))
    return leaves


def _model_facing_strings(manifest: dict[str, Any]) -> list[str]:
    """Every key and string value outside :data:`NOT_MODEL_FACING`, in no particular order (a
    lean walk for the screen; :func:`_leaves` locates what the screen finds)."""
    out: list[str] = list(manifest)
    add = out.append
    stack = [item for key, item in manifest.items() if key not in NOT_MODEL_FACING]
    pop, extend = stack.pop, stack.extend
    while stack:
        node = pop()
        if type(node) is str:
            add(node)
        elif isinstance(node, dict):
            out.extend(node)
            extend(node.values())
        elif isinstance(node, list):
            extend(node)
    return out


def _may_any_be_injection(texts: list[str]) -> bool:
    """:func:`_may_be_injection` for many strings in one call of the Rust engine: on the strings
    joined by line feeds, a superset (a match inside one string is a match in the joined text:
    the patterns have no anchors, and a line feed is a non-word character like a string's end)."""
    fast = _prefilter()
    if fast is None:
        return True
    joined = "\n".join(texts)
    return not fast.is_valid(joined if joined.isascii() else _NON_ASCII.sub(_stand_in, joined))


@cache
def _dangerous_screen() -> Any:
    """A jsonschema-rs validator that accepts a JSON value when no string in it (keys included)
    holds a character of the table. Exact: a character class has one meaning in every engine.
    None if it cannot be built or does not see what Python's ``re`` sees."""
    literal = "".join(
        chr(first) if first == last else f"{chr(first)}-{chr(last)}" for first, last, _ in DANGEROUS_CHARACTERS
    )
    clean = {"not": {"pattern": f"[{literal}]"}}
    schema = {
        "$defs": {
            "c": {
                "if": {"type": "string"},
                "then": clean,
                "propertyNames": clean,
                "items": {"$ref": "#/$defs/c"},
                "additionalProperties": {"$ref": "#/$defs/c"},
            }
        },
        "$ref": "#/$defs/c",
    }
    try:
        screen = jsonschema_rs.Draft202012Validator(schema)
    except (ValueError, jsonschema_rs.ReferencingError):  # pragma: no cover - depends on the engine
        return None
    edges = [chr(cp) for first, last, _ in DANGEROUS_CHARACTERS for cp in (first, last)]
    if any(screen.is_valid({"k": ["a" + ch]}) for ch in edges) or not screen.is_valid(["\t\n\r é\u00ae\u2070"]):
        return None  # pragma: no cover - the engine reads the class differently: use Python
    return screen


def _may_have_dangerous(value: Any) -> bool:
    screen = _dangerous_screen()
    return screen is None or not screen.is_valid(value)


def _pointer(parent: str, token: str | int | None) -> str:
    if token is None:
        return parent
    if isinstance(token, int):
        return f"{parent}/{token}"
    if "~" in token or "/" in token:
        token = escape_pointer(token)
    return f"{parent}/{token}"


def _characters(text: str, pointer: str) -> list[TextFinding]:
    controls: list[str] = []
    hidden: list[str] = []
    for match in _DANGEROUS.finditer(text):
        ch = match.group()
        name = describe_character(ch)
        target = controls if _CONTROL.match(ch) else hidden
        if name not in target:
            target.append(name)
    found = []
    if controls:
        found.append(TextFinding("control", pointer, ", ".join(controls[:5])))
    if hidden:
        found.append(TextFinding("hidden", pointer, ", ".join(hidden[:5])))
    return found
