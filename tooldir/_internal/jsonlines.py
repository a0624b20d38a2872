"""Where the JSON Pointers a caller asks about start in a JSON document: ``pointer -> line`` (1-based).

``json`` keeps no positions; SARIF wants a line for a diagnostic's pointer into ``schema.json``.
This scanner walks the text once, exactly as JSON's grammar (RFC 8259) reads it: an object
member's pointer maps to the line of its key, an array element's to the line where the element
starts, the root (``""``) to the line of its first character. Keys are decoded by :func:`json.loads`
so escapes mean what they mean to the parser; a key given twice keeps its first line.

Only the asked pointers (at most :data:`MAX_POINTERS` per document) are followed, through a trie of
their tokens: a value no asked pointer leads into is skipped without naming anything inside it, so
the memory is the asked pointers' size whatever the document holds (a map of *every* pointer of a
244 KB document can take gigabytes: a 100 KB key over 70,000 array elements names 70,000 pointers
of 100 KB each). An asked pointer the document lacks gets its nearest ancestor's line.

Only meant for text the strict parser accepted; on anything else it returns what it found so far.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable

MAX_DEPTH = 512  # deeper than the strict parser allows; stops a pathological input
MAX_POINTERS = 1000  # asked pointers per document; the rest get no line


def pointer_lines(text: str, pointers: Iterable[str]) -> dict[str, int]:
    """The line of each of ``pointers`` (the first :data:`MAX_POINTERS` distinct ones) or of its
    nearest ancestor in ``text``; a pointer without even a root line is left out."""
    asked: list[str] = []
    root = _Node()
    for pointer in pointers:
        if len(asked) >= MAX_POINTERS:
            break
        if pointer != "" and not pointer.startswith("/"):
            continue  # not a JSON Pointer
        node = root
        for token in pointer.split("/")[1:]:
            node = node.children.setdefault(token, _Node())
        if not node.asked:
            node.asked = True
            asked.append(pointer)
    scanner = _Scanner(text)
    with contextlib.suppress(ValueError, IndexError):  # not valid JSON after all: keep what was found
        scanner.value(root, 0)
    out: dict[str, int] = {}
    for pointer in asked:
        node, line = root, root.line
        for token in pointer.split("/")[1:]:
            child = node.children.get(token)
            if child is None or child.line is None:
                break
            node, line = child, child.line
        if line is not None:
            out[pointer] = line
    return out


def escape_token(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


class _Node:
    __slots__ = ("asked", "children", "line")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.line: int | None = None
        self.asked = False


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.line = 1

    def ws(self) -> None:
        text, pos = self.text, self.pos
        while pos < len(text) and text[pos] in " \t\n\r":
            if text[pos] == "\n":
                self.line += 1
            pos += 1
        self.pos = pos

    def value(self, node: _Node | None, depth: int) -> None:
        """Scan one value; ``node`` is its place in the trie of asked pointers (None: no asked
        pointer leads here, so nothing inside is named)."""
        if depth > MAX_DEPTH:
            raise ValueError("not JSON")
        self.ws()
        if node is not None and node.line is None:
            node.line = self.line
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
                raw = self.string()
                child = None
                if node is not None and node.children:
                    key = json.loads(raw)
                    if not isinstance(key, str):
                        raise ValueError("not JSON")
                    child = node.children.get(escape_token(key))
                    if child is not None and child.line is None:
                        child.line = line
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
                self.value(None if node is None or not node.children else node.children.get(str(index)), depth + 1)
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
