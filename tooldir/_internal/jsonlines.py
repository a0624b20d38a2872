"""Where each JSON Pointer of a JSON document starts: ``pointer -> line`` (1-based).

``json`` keeps no positions; SARIF wants a line for a diagnostic's pointer into ``schema.json``.
This scanner walks the text once, exactly as JSON's grammar (RFC 8259) reads it: an object
member's pointer maps to the line of its key, an array element's to the line where the element
starts, the root (``""``) to the line of its first character. Keys are decoded by :func:`json.loads`
so escapes mean what they mean to the parser; a key given twice keeps its first line. Look a
pointer up with :func:`line_of`, which falls back to the nearest ancestor.

Only meant for text the strict parser accepted; on anything else it returns what it found so far.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping

MAX_DEPTH = 512  # deeper than the strict parser allows; stops a pathological input


def pointer_lines(text: str) -> dict[str, int]:
    scanner = _Scanner(text)
    with contextlib.suppress(ValueError, IndexError):  # not valid JSON after all: keep what was found
        scanner.value("", 0)
    return scanner.lines


def line_of(lines: Mapping[str, int], pointer: str) -> int | None:
    """The line of ``pointer`` or of its nearest listed ancestor (None: not even the root)."""
    while True:
        found = lines.get(pointer)
        if found is not None or not pointer:
            return found
        pointer = pointer.rsplit("/", 1)[0]


def escape_token(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.line = 1
        self.lines: dict[str, int] = {}

    def ws(self) -> None:
        text, pos = self.text, self.pos
        while pos < len(text) and text[pos] in " \t\n\r":
            if text[pos] == "\n":
                self.line += 1
            pos += 1
        self.pos = pos

    def value(self, pointer: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise ValueError("not JSON")
        self.ws()
        self.lines.setdefault(pointer, self.line)
        char = self.text[self.pos]
        if char == "{":
            self.pos += 1
            self.ws()
            if self.text[self.pos] == "}":
                self.pos += 1
                return
            while True:
                self.ws()
                line = self.line
                key = json.loads(self.string())
                if not isinstance(key, str):
                    raise ValueError("not JSON")
                child = f"{pointer}/{escape_token(key)}"
                self.lines.setdefault(child, line)
                self.ws()
                self.expect(":")
                self.value(child, depth + 1)
                self.ws()
                if self.text[self.pos] == ",":
                    self.pos += 1
                    continue
                self.expect("}")
                return
        if char == "[":
            self.pos += 1
            self.ws()
            if self.text[self.pos] == "]":
                self.pos += 1
                return
            index = 0
            while True:
                self.value(f"{pointer}/{index}", depth + 1)
                index += 1
                self.ws()
                if self.text[self.pos] == ",":
                    self.pos += 1
                    continue
                self.expect("]")
                return
        if char == '"':
            self.string()
            return
        start = self.pos  # a number, true, false or null: up to the next delimiter
        while self.pos < len(self.text) and self.text[self.pos] not in " \t\n\r,]}":
            self.pos += 1
        if self.pos == start:
            raise ValueError("not JSON")

    def string(self) -> str:
        """The raw string token at ``pos`` (quotes included); strings never span lines in JSON."""
        text, start = self.text, self.pos
        if text[start] != '"':
            raise ValueError("not JSON")
        pos = start + 1
        while True:
            char = text[pos]
            if char == "\\":
                pos += 2
            elif char == '"':
                self.pos = pos + 1
                return text[start : self.pos]
            elif char == "\n":
                raise ValueError("not JSON")
            else:
                pos += 1

    def expect(self, char: str) -> None:
        if self.text[self.pos] != char:
            raise ValueError("not JSON")
        self.pos += 1
