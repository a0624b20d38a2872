"""Text the model will read: find invisible characters and injection-like instructions.

These are warnings (``suspicious-text``): a reviewer must see them in full before approving.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from functools import cache
from typing import Any

import jsonschema_rs

_INVISIBLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
    "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\U000e0000-\U000e007f\U000e0100-\U000e01ef]"
)

_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


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
_INJECTION = [(re.compile(source, re.I), reason) for reason, source in _INJECTION_SOURCES]


def _injection_union() -> str:
    """Every injection pattern as one case-insensitive regex, for jsonschema-rs's ``pattern``."""
    return "(?i)" + "|".join(f"(?:{source})" for _, source in _INJECTION_SOURCES)


def clean_strings_schema() -> dict[str, Any]:
    """A JSON Schema, to be placed at ``#/$defs/clean``, that accepts a value when no string in it
    (at any depth) matches an injection pattern. See :func:`_prefilter` for when this is sound."""
    union = _injection_union()
    return {
        "if": {"type": "string"},
        "then": {"not": {"pattern": union}},
        "items": {"$ref": "#/$defs/clean"},
        "additionalProperties": {"$ref": "#/$defs/clean"},
    }


def clean_descriptions_schema() -> dict[str, Any]:
    """Like :func:`clean_strings_schema` but only for values under a ``description`` key, at any
    depth (the injection check reads descriptions only). Place it at ``#/$defs/clean_descriptions``."""
    union = _injection_union()
    again = {"$ref": "#/$defs/clean_descriptions"}
    return {
        "properties": {"description": {"not": {"pattern": union}}},
        # in an allOf so that it also descends into a "description" member that is an object
        "allOf": [{"additionalProperties": again}],
        "items": again,
    }


@cache
def _prefilter() -> Any:
    """A compiled jsonschema-rs validator that accepts a JSON value when no string in it matches
    any injection pattern. Rust's regex engine scans a whole manifest in microseconds where eight
    Python regexes over every description cost hundreds. Sound on ASCII text only: there Python
    and ECMA/Rust agree on ``\\b``, ``\\s`` and case folding. None if it cannot be built."""
    schema = {"$defs": {"clean": clean_strings_schema()}, "$ref": "#/$defs/clean"}
    # Every string is checked (not only descriptions): a superset, so the filter stays sound.
    try:
        return jsonschema_rs.Draft202012Validator(schema)
    except (ValueError, jsonschema_rs.ReferencingError):  # pragma: no cover - depends on the engine
        return None


def invisible_characters(text: str) -> list[str]:
    """Names of invisible, bidi-control and tag characters in ``text``."""
    found = []
    for match in _INVISIBLE.finditer(text):
        ch = match.group()
        found.append(f"U+{ord(ch):04X} {unicodedata.name(ch, 'UNNAMED')}")
    found.extend(f"U+{ord(m.group()):04X} control character" for m in _CONTROL.finditer(text))
    return found


def injection_reasons(text: str) -> Iterator[str]:
    """Why ``text`` reads like an instruction to the model (one reason per matching pattern)."""
    fast = _prefilter()
    if fast is not None and text.isascii() and fast.is_valid(text):
        return
    for pattern, reason in _INJECTION:
        match = pattern.search(text)
        if match:
            yield f"{reason}: {match.group()!r}"


def may_hide_characters(raw_json: str) -> bool:
    """False only when no string of the JSON document ``raw_json`` can hold an invisible or
    control character: ASCII, no DEL, and no escape that could encode one."""
    if not raw_json.isascii() or "\x7f" in raw_json:
        return True
    return "\\" in raw_json and ("\\u" in raw_json or "\\b" in raw_json or "\\f" in raw_json)


def may_contain_injection(value: Any, raw_json: str) -> bool:
    """False only when no string in ``value`` (parsed from the JSON text ``raw_json``) can match an
    injection pattern. Conservative: non-ASCII text or ``\\u`` escapes always answer True."""
    if not raw_json.isascii() or ("\\" in raw_json and "\\u" in raw_json):
        return True
    fast = _prefilter()
    return fast is None or not fast.is_valid(value)
