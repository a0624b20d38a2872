"""Where each key of a TOML document is defined: ``key path -> line`` (1-based).

``tomllib`` parses values but keeps no positions; the policy wants ``FILE:LINE`` origins. This
scanner only finds the *start* of every statement (a ``[table]`` / ``[[array]]`` header or a
``key = value`` line) and skips values by their lexical shape (strings of all four kinds, nested
arrays and inline tables, comments); the key text itself is decoded by ``tomllib`` so quoting and
dotted keys mean exactly what they mean to the parser. Keys inside inline tables are not listed:
look a path up with :func:`line_of`, which falls back to the nearest listed ancestor.

Only call it on text ``tomllib`` accepted; on anything else it returns what it found so far.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from typing import Any

KeyPath = tuple[str, ...]


def key_lines(text: str) -> dict[KeyPath, int]:
    lines: dict[KeyPath, int] = {}
    table: KeyPath = ()
    pos, line, end = 0, 1, len(text)
    try:
        while pos < end:
            char = text[pos]
            if char == "\n":
                line += 1
                pos += 1
            elif char in " \t\r":
                pos += 1
            elif char == "#":
                pos = _line_end(text, pos)
            elif char == "[":
                width = 2 if text.startswith("[[", pos) else 1
                close = _key_end(text, pos + width, "]")
                table = _decode(text[pos + width : close])
                lines.setdefault(table, line)
                pos = close + width
            else:
                equals = _key_end(text, pos, "=")
                lines.setdefault(table + _decode(text[pos:equals]), line)
                pos, line = _skip_value(text, equals + 1, line)
    except (ValueError, tomllib.TOMLDecodeError):
        pass  # not valid TOML after all: keep what was found
    return lines


def line_of(lines: Mapping[KeyPath, int], path: KeyPath) -> int | None:
    """The line defining ``path`` or, for keys inside an inline table or array, its nearest ancestor."""
    for size in range(len(path), 0, -1):
        found = lines.get(path[:size])
        if found is not None:
            return found
    return None


def _decode(raw: str) -> KeyPath:
    """A (dotted, possibly quoted) key as tomllib reads it."""
    data: Any = tomllib.loads(raw.strip() + " = 0")
    path: list[str] = []
    while isinstance(data, dict) and len(data) == 1:
        key = next(iter(data))
        path.append(key)
        data = data[key]
    return tuple(path)


def _line_end(text: str, pos: int) -> int:
    found = text.find("\n", pos)
    return len(text) if found < 0 else found


def _key_end(text: str, pos: int, stop: str) -> int:
    """Index of ``stop`` after a key starting at ``pos``, skipping quoted parts."""
    while pos < len(text):
        char = text[pos]
        if char == stop:
            return pos
        if char == '"':
            pos = _basic_end(text, pos + 1)
        elif char == "'":
            pos = _required(text.find("'", pos + 1)) + 1
        elif char == "\n":
            raise ValueError("key without a value")
        else:
            pos += 1
    raise ValueError("unterminated key")


def _required(index: int) -> int:
    if index < 0:
        raise ValueError("unterminated string")
    return index


def _basic_end(text: str, pos: int) -> int:
    """Just past the closing quote of a one-line basic string whose content starts at ``pos``."""
    while pos < len(text):
        char = text[pos]
        if char == "\\":
            pos += 2
        elif char == '"':
            return pos + 1
        else:
            pos += 1
    raise ValueError("unterminated string")


def _skip_value(text: str, pos: int, line: int) -> tuple[int, int]:
    """Skip one value (to the end of its statement); returns (position, line) after it."""
    depth = 0
    while pos < len(text):
        char = text[pos]
        if char == "\n":
            if depth == 0:
                return pos, line
            line += 1
            pos += 1
        elif char == "#":
            pos = _line_end(text, pos)
        elif char in "[{":
            depth += 1
            pos += 1
        elif char in "]}":
            depth -= 1
            pos += 1
        elif text.startswith('"""', pos) or text.startswith("'''", pos):
            quote = text[pos : pos + 3]
            start = pos + 3
            pos = start
            while True:
                close = _required(text.find(quote, pos))
                if quote == '"""' and _escaped(text, start, close):
                    pos = close + 1
                    continue
                break
            run = 3
            while run < 5 and close + run < len(text) and text[close + run] == quote[0]:
                run += 1  # up to two quote characters may directly precede the closing delimiter
            close += run
            line += text.count("\n", start, close)
            pos = close
        elif char == '"':
            pos = _basic_end(text, pos + 1)
        elif char == "'":
            pos = _required(text.find("'", pos + 1)) + 1
        else:
            pos += 1
    return pos, line


def _escaped(text: str, start: int, index: int) -> bool:
    """Is the character at ``index`` preceded by an odd number of backslashes (after ``start``)?"""
    count = 0
    while index - 1 - count >= start and text[index - 1 - count] == "\\":
        count += 1
    return count % 2 == 1
