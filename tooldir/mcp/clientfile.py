"""Merge tooldir's entry into an MCP client's configuration file (``tooldir serve --install-config``).

Idempotent (a second run changes nothing), the rest of the file kept (JSON: every other key, in
order; TOML: every other line, byte for byte), a backup beside it whenever it changes, and what is
written parses or nothing is written.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._internal.atomic import write_atomic
from ..errors import ConfigError
from .clients import SERVER_NAME, client_config

# a client configuration larger than this is not one
MAX_CONFIG_BYTES = 16 * 1024 * 1024


class ConfigFileError(ConfigError):
    """A client configuration file that cannot be merged into safely (the message names the file)."""


@dataclass(frozen=True, slots=True)
class Installed:
    path: Path  # the file written (a symlink's target)
    changed: bool  # False: the entry was there already, byte for byte; nothing was written
    backup: Path | None  # the previous content, when there was a file and it changed


def install_client_config(
    client: str, path: Path, command: str, args: Sequence[str], *, name: str = SERVER_NAME
) -> Installed:
    """Make ``path`` (the client's configuration) start ``command args`` as server ``name``:
    the entry is added or replaced, everything else in the file is kept (JSON: every other key, in
    order; TOML: every other line, byte for byte). Idempotent. Raises ConfigFileError for a file
    that is not a regular file, not plain JSON/TOML, or too large; OSError when it cannot be written."""
    target = Path(os.path.realpath(path))  # a dotfile manager's symlink is written through, not replaced
    old = _read_config(target)
    if client == "codex":
        new = _merged_toml(target, old, client_config(client, command, args, name=name))
    else:
        entry = client_config(client, command, args, name=name)
        new = _merged_json(target, old, client, entry, name)
    if old == new:
        return Installed(target, False, None)
    backup = None
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    mode = 0o600
    if old is not None:
        mode = stat.S_IMODE(target.stat().st_mode)
        backup = target.with_name(target.name + ".bak")
        write_atomic(backup, old, mode=mode)
    write_atomic(target, new, mode=mode, sync_dir=True)
    return Installed(target, True, backup)


def _read_config(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigFileError(f"{path}: cannot read: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ConfigFileError(f"{path}: not a regular file")
        if info.st_size > MAX_CONFIG_BYTES:
            raise ConfigFileError(f"{path}: {info.st_size} bytes; a client configuration is at most {MAX_CONFIG_BYTES}")
        return fh.read(MAX_CONFIG_BYTES + 1)


def _merged_json(path: Path, old: bytes | None, client: str, snippet: str, name: str) -> bytes:
    doc: object = {}
    if old is not None and old.strip():
        try:
            doc = json.loads(old)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ConfigFileError(
                f"{path}: not plain JSON ({exc}); comments are not kept by a merge, so add the entry of "
                f"`tooldir serve --print-config {client}` by hand"
            ) from None
    if not isinstance(doc, dict):
        raise ConfigFileError(f"{path}: expected a JSON object at the top")
    key = "servers" if client == "vscode" else "mcpServers"
    servers = doc.setdefault(key, {})
    if not isinstance(servers, dict):
        raise ConfigFileError(f"{path}: '{key}' is not an object")
    entry = json.loads(snippet)[key][name]
    if servers.get(name) == entry and old is not None:
        return old
    servers[name] = entry
    return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _merged_toml(path: Path, old: bytes | None, block: str) -> bytes:
    text = ""
    if old is not None:
        try:
            text = old.decode("utf-8")
            tomllib.loads(text)
        except (UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as exc:
            raise ConfigFileError(f"{path}: not valid TOML ({exc}); fix it first") from None
    header = block.splitlines()[0]
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if _is_header(line, header)), None)
    if start is None:
        glue = "" if not text or text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
        merged = text + glue + block
    else:
        end = next((i for i in range(start + 1, len(lines)) if _TABLE.match(lines[i])), len(lines))
        tail = "".join(lines[end:])
        merged = "".join(lines[:start]) + block + ("\n" + tail if tail else "")
        if "".join(lines[start:end]).rstrip("\n") == block.rstrip("\n"):
            return old if old is not None else merged.encode("utf-8")
    try:
        tomllib.loads(merged)  # what we write parses, or we write nothing
    except tomllib.TOMLDecodeError as exc:
        raise ConfigFileError(
            f"{path}: the merged file would not be valid TOML ({exc}); add the entry by hand"
        ) from None
    return merged.encode("utf-8")


_TABLE = re.compile(r"^\s*\[")


def _is_header(line: str, header: str) -> bool:
    return line.split("#", 1)[0].strip().replace(" ", "") == header.replace(" ", "")


# -- tooldir adopt --write-client-config ------------------------------------------------------------

BACKUP_SUFFIX = ".tooldir-backup"


@dataclass(frozen=True, slots=True)
class Rewritten:
    path: Path
    changed: bool
    backup: Path | None
    removed: tuple[str, ...]  # the server names replaced


def replace_with_tooldir(
    client: str,
    path: Path,
    names: Sequence[Sequence[str]],
    command: str,
    args: Sequence[str],
    *,
    name: str = SERVER_NAME,
) -> Rewritten:
    """Replace the server entries at ``names`` (key paths from the top: ``("mcpServers", "github")``,
    ``("projects", "/src/x", "mcpServers", "github")``; TOML ``("mcp_servers", "github")``) of the
    client's file with one entry ``name`` starting ``command args``, in each servers table that held
    one. Everything else is kept byte for byte (the entries are cut out of the text, the new entry is
    put where the first one was); the result is parsed and must equal the old document without those
    entries and with the new one, or nothing is written. Idempotent; the previous content goes to
    ``<file>.tooldir-backup`` (``.tooldir-backup.2``, ... when one is there already)."""
    target = Path(os.path.realpath(path))
    old = _read_config(target)
    if old is None:
        raise ConfigFileError(f"{path}: not found")
    try:
        text = old.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigFileError(f"{path}: invalid UTF-8 at byte {exc.start}") from None
    if client == "codex":
        new = _replaced_toml(target, text, names, command=command, args=args, name=name)
    else:
        new = _replaced_json(target, text, names, client=client, command=command, args=args, name=name)
    if new == text:
        return Rewritten(target, False, None, ())
    backup = target.with_name(target.name + BACKUP_SUFFIX)
    n = 2
    while backup.exists():
        backup = target.with_name(f"{target.name}{BACKUP_SUFFIX}.{n}")
        n += 1
    mode = stat.S_IMODE(target.stat().st_mode)
    write_atomic(backup, old, mode=mode)
    write_atomic(target, new.encode("utf-8"), mode=mode, sync_dir=True)
    return Rewritten(target, True, backup, tuple(path_[-1] for path_ in names))


def _replaced_json(
    path: Path, text: str, names: Sequence[Sequence[str]], *, client: str, command: str, args: Sequence[str], name: str
) -> str:
    try:
        json.loads(text)
    except ValueError as exc:
        raise ConfigFileError(f"{path}: not plain JSON ({exc}); edit it by hand") from None
    entry = json.loads(client_config(client, command, args, name=name))
    entry = entry["servers" if client == "vscode" else "mcpServers"][name]
    tables: dict[tuple[str, ...], list[str]] = {}
    for key_path in names:
        tables.setdefault(tuple(key_path[:-1]), []).append(key_path[-1])
    expected = json.loads(text)
    edits: list[tuple[int, int, str]] = []
    for table, keys in tables.items():
        holder: Any = expected
        for key in table:
            holder = holder.get(key) if isinstance(holder, dict) else None
        if not isinstance(holder, dict):
            raise ConfigFileError(f"{path}: {'.'.join(table)} is not an object")
        present = [k for k in keys if k in holder]
        if not present:
            continue
        for k in present:
            del holder[k]
        spans = _member_spans(text, table)
        if name in holder and holder[name] != entry:
            raise ConfigFileError(f"{path}: it has a server named {name!r} already, not tooldir's; rename it first")
        order = [k for k, _, _, _ in spans]
        first = min(order.index(k) for k in present)
        indent = _indent_of(text, spans[first][1])
        body = json.dumps(entry, indent=2, ensure_ascii=False).replace("\n", "\n" + indent)
        replacement = json.dumps(name) + ": " + body
        drop = [i for i, (k, _, _, _) in enumerate(spans) if k in present]
        if name in holder:
            replacement = ""  # tooldir's entry is there already: only cut the others out
        else:
            holder[name] = entry
        edits += _cut_members(text, spans, drop, first, replacement)
    new = text
    for start, end, repl in sorted(edits, reverse=True):
        new = new[:start] + repl + new[end:]
    try:
        if json.loads(new) != expected:
            raise ValueError("differs")
    except ValueError:
        raise ConfigFileError(f"{path}: the entries could not be replaced safely; edit it by hand") from None
    return new


def _indent_of(text: str, pos: int) -> str:
    line_start = text.rfind("\n", 0, pos) + 1
    head = text[line_start:pos]
    return head if not head.strip() else ""


def _cut_members(
    text: str, spans: list[tuple[str, int, int, int]], drop: list[int], first: int, replacement: str
) -> list[tuple[int, int, str]]:
    """Edits that remove members ``drop`` of one object (members' (key, start, end, comma_end)),
    ``replacement`` (when not empty) put in place of member ``first``. A removed member takes the
    separator before it (or, when nothing before it stays, the one after it), so the members that
    stay keep their own bytes and separators."""
    survivors = [i for i in range(len(spans)) if i not in drop or (i == first and replacement)]
    edits: list[tuple[int, int, str]] = []
    cuts: list[tuple[int, int]] = []
    if replacement:
        edits.append((spans[first][1], spans[first][2], replacement))
    if not survivors:
        cuts.append((spans[0][1], spans[-1][2]))
    for i in drop:
        if i == first and replacement:
            continue
        before = [j for j in survivors if j < i]
        if before:
            cuts.append((spans[before[-1]][2], spans[i][2]))
        elif survivors:
            after = [j for j in survivors if j > i]
            cuts.append((spans[i][1], spans[after[0]][1]))
    merged: list[tuple[int, int]] = []
    for start, end in sorted(cuts):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return edits + [(start, end, "") for start, end in merged]


_WS = " \t\n\r"


def _member_spans(text: str, table: Sequence[str]) -> list[tuple[str, int, int, int]]:
    """(key, start of its key, end of its value, end of the comma after it or its value) of each
    member of the object at ``table`` (a key path)."""
    decoder = json.JSONDecoder()
    pos = 0

    def ws(i: int) -> int:
        while i < len(text) and text[i] in _WS:
            i += 1
        return i

    def skip_value(i: int) -> int:
        i = ws(i)
        if text[i] in "{[":
            close = "}" if text[i] == "{" else "]"
            i = ws(i + 1)
            if text[i] == close:
                return i + 1
            while True:
                if close == "}":
                    _, i = decoder.raw_decode(text, ws(i))
                    i = ws(i) + 1  # the colon
                i = ws(skip_value(i))
                if text[i] == ",":
                    i += 1
                    continue
                return i + 1
        _, end = decoder.raw_decode(text, i)
        return int(end)

    def members(i: int) -> list[tuple[str, int, int, int]]:
        i = ws(i)
        assert text[i] == "{"  # noqa: S101 - checked by the caller's json.loads
        out: list[tuple[str, int, int, int]] = []
        i = ws(i + 1)
        if text[i] == "}":
            return out
        while True:
            i = ws(i)
            key, after = decoder.raw_decode(text, i)
            colon = ws(after)
            end = skip_value(colon + 1)
            nxt = ws(end)
            out.append((str(key), i, end, nxt + 1 if text[nxt] == "," else end))
            if text[nxt] == ",":
                i = nxt + 1
                continue
            return out

    for key in table:
        found = [m for m in members(pos) if m[0] == key]
        if not found:
            raise ConfigFileError(f"no {key!r} in the file")
        _, start, _, _ = found[-1]
        _, after = decoder.raw_decode(text, start)
        pos = ws(ws(after) + 1)
    return members(pos)


def _replaced_toml(
    path: Path, text: str, names: Sequence[Sequence[str]], *, command: str, args: Sequence[str], name: str
) -> str:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigFileError(f"{path}: not valid TOML ({exc}); fix it first") from None
    servers = doc.get("mcp_servers", {})
    gone = [p[-1] for p in names if p[-1] in servers]
    if not gone:
        return text
    lines = text.splitlines(keepends=True)
    keep: list[str] = []
    dropping = False
    for line in lines:
        head = _TOML_HEADER.match(line)
        if head is not None:
            key = tomllib.loads(f"[{head.group(1)}]\n")
            top = next(iter(key))
            sub = key[top]
            dropping = top == "mcp_servers" and isinstance(sub, dict) and next(iter(sub), None) in gone
        if not dropping:
            keep.append(line)
    new = "".join(keep)
    expected = dict(doc)
    expected["mcp_servers"] = {k: v for k, v in servers.items() if k not in gone}
    block = client_config("codex", command, args, name=name)
    if name not in servers:
        new = _merged_toml(path, new.encode("utf-8"), block).decode("utf-8")
        expected["mcp_servers"][name] = tomllib.loads(block)["mcp_servers"][name]
    try:
        if tomllib.loads(new) != expected:
            raise ValueError("differs")
    except (ValueError, tomllib.TOMLDecodeError):
        raise ConfigFileError(f"{path}: the entries could not be replaced safely; edit it by hand") from None
    return new


_TOML_HEADER = re.compile(r"^\s*\[([^\[\]#]+)\]\s*(#.*)?$")
