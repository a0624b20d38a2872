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

from ._internal.atomic import write_atomic
from .errors import ConfigError
from .mcp_config import SERVER_NAME, client_config

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
