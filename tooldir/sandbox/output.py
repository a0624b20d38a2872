"""Tool output made safe: bounded reads and terminal escape sequences stripped. Pure."""

from __future__ import annotations

import re
from typing import Any

from ..text import BIDI, CONTROL, TAG, character_class

# ESC-introduced sequences (CSI ... final, OSC ... BEL/ST, DCS/SOS/PM/APC ... ST, two-byte ESC x),
# their 8-bit C1 forms, and every other C0/C1 control except tab and newline (tooldir.text's
# control characters, and a carriage return).
_ESCAPES = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"  # CSI
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f]).*?(?:\x07|\x1b\\|\x9c|$)"  # OSC, DCS, SOS, PM, APC
    r"|\x1b[ -/]*[0-~]"  # two-byte and nF escapes
    "|" + character_class((CONTROL,), extra="\r"),  # the remaining controls (tab, LF kept)
    re.DOTALL,
)
# bidi formatting (it reorders what is shown) and tag characters (invisible text a model reads);
# other invisible characters stay: joiners and variation selectors are part of emoji
_BIDI = re.compile(character_class((BIDI, TAG)))


def sanitize_text(text: str) -> str:
    """Remove terminal escape sequences, control characters (except tab and newline), bidi
    formatting and tag characters (tables in :mod:`tooldir.text`). ``\\r\\n`` becomes ``\\n``."""
    text = text.replace("\r\n", "\n")
    return _BIDI.sub("", _ESCAPES.sub("", text))


def sanitize_json(value: Any) -> Any:
    """``sanitize_text`` applied to every string (keys included) of a JSON value."""
    if isinstance(value, str):
        return sanitize_text(value)
    if isinstance(value, dict):
        return {sanitize_text(k): sanitize_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [sanitize_json(v) for v in value]
    return value


class CappedBuffer:
    """Collects at most ``cap`` bytes; remembers whether more arrived."""

    __slots__ = ("cap", "chunks", "size", "truncated")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.chunks: list[bytes] = []
        self.size = 0
        self.truncated = False

    def feed(self, data: bytes) -> bool:
        """Append; returns False once the cap is exceeded (the caller should stop the tool)."""
        room = self.cap - self.size
        if len(data) > room:
            if room > 0:
                self.chunks.append(data[:room])
                self.size = self.cap
            self.truncated = True
            return False
        self.chunks.append(data)
        self.size += len(data)
        return True

    def value(self) -> bytes:
        return b"".join(self.chunks)
