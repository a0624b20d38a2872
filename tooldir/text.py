"""Text the model will read: find invisible characters and injection-like instructions.

These are warnings (``suspicious-text``): a reviewer must see them in full before approving.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator

_INVISIBLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
    "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\U000e0000-\U000e007f\U000e0100-\U000e01ef]"
)

_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")

_INJECTION = [
    (
        re.compile(r"\bignore\b.{0,40}\b(instructions|previous|above|prior|system)\b", re.I | re.S),
        "asks to ignore instructions",
    ),
    (re.compile(r"\b(system prompt|developer message)\b", re.I), "mentions the system prompt"),
    (re.compile(r"<\s*/?\s*(important|system|instructions?)\s*>", re.I), "contains instruction-like tags"),
    (
        re.compile(r"(~/\.ssh|id_rsa|id_ed25519|\.aws/credentials|\.netrc|\.env\b|/etc/passwd|/etc/shadow)", re.I),
        "names secret files",
    ),
    (
        re.compile(r"\b(api[ _-]?keys?|secret keys?|passwords?|private keys?|access tokens?|credentials)\b", re.I),
        "talks about secrets",
    ),
    (
        re.compile(
            r"\b(before|after|instead of) (using|calling|running) (this|any|the|other)\b.{0,60}\b(call|use|run|read|send)\b",
            re.I | re.S,
        ),
        "tells the model to call other tools",
    ),
    (
        re.compile(r"\b(do not|don't|never) (tell|inform|mention|show|reveal)\b.{0,30}\b(user|human)\b", re.I | re.S),
        "asks to hide things from the user",
    ),
    (
        re.compile(r"\b(exfiltrate|send (it|them|this|the contents?) to|upload (it|them) to|curl\s+https?://)", re.I),
        "asks to send data elsewhere",
    ),
]


def invisible_characters(text: str) -> list[str]:
    """Names of invisible, bidi-control and tag characters in ``text``."""
    found = []
    for match in _INVISIBLE.finditer(text):
        ch = match.group()
        found.append(f"U+{ord(ch):04X} {unicodedata.name(ch, 'UNNAMED')}")
    found.extend(f"U+{ord(m.group()):04X} control character" for m in _CONTROL.finditer(text))
    return found


def injection_reasons(text: str) -> Iterator[str]:
    for pattern, reason in _INJECTION:
        match = pattern.search(text)
        if match:
            yield f"{reason}: {match.group()!r}"
