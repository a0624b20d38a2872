"""What each MCP client expects in its configuration to start ``tooldir serve`` (pure).

``tooldir serve --print-config CLIENT`` prints one of these; paste it into the client's
**user-level** file (a file inside a project could point the client at anything):

* ``claude-code``: ``.mcp.json`` / ``~/.claude.json`` -- JSON ``{"mcpServers": {NAME: {...}}}``;
* ``cursor``: ``~/.cursor/mcp.json`` -- JSON ``{"mcpServers": {NAME: {...}}}``;
* ``vscode``: ``.vscode/mcp.json`` or the user ``mcp.json`` -- JSON ``{"servers": {NAME: {...}}}``;
* ``codex``: ``~/.codex/config.toml`` -- TOML ``[mcp_servers.NAME]``.

``tooldir serve --install-config CLIENT`` merges the entry into that user-level file instead
(:mod:`tooldir.mcp.clientfile`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

CLIENTS = ("claude-code", "cursor", "codex", "vscode")
SERVER_NAME = "tooldir"
# the client's own variable for the folder it has open, where it has one; elsewhere the server's
# working directory (the folder the client starts it in) is the project
WORKSPACE_VARIABLE = {"vscode": "${workspaceFolder}", "cursor": "${workspaceFolder}"}


def user_config_path(client: str, home: Path | None = None) -> Path:
    """The client's user-level configuration file (never one inside a project)."""
    base = Path.home() if home is None else home
    paths = {
        "claude-code": base / ".claude.json",
        "cursor": base / ".cursor" / "mcp.json",
        "vscode": Path(os.environ.get("XDG_CONFIG_HOME") or base / ".config") / "Code" / "User" / "mcp.json",
        "codex": base / ".codex" / "config.toml",
    }
    if client not in paths:
        raise ValueError(f"unknown client {client!r}: one of {', '.join(CLIENTS)}")
    return paths[client]


def client_config(client: str, command: str, args: Sequence[str], *, name: str = SERVER_NAME) -> str:
    """The snippet (ending in a newline) that makes ``client`` start ``command args`` over stdio."""
    argv = list(args)
    if client == "claude-code":
        doc: dict[str, object] = {"mcpServers": {name: {"type": "stdio", "command": command, "args": argv, "env": {}}}}
    elif client == "cursor":
        doc = {"mcpServers": {name: {"command": command, "args": argv}}}
    elif client == "vscode":
        doc = {"servers": {name: {"type": "stdio", "command": command, "args": argv}}}
    elif client == "codex":
        return (
            f"[mcp_servers.{_toml_key(name)}]\n"
            f"command = {_toml_string(command)}\n"
            f"args = [{', '.join(_toml_string(a) for a in argv)}]\n"
        )
    else:
        raise ValueError(f"unknown client {client!r}: one of {', '.join(CLIENTS)}")
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def _toml_string(value: str) -> str:
    """A TOML basic string: quote and backslash escaped, control characters as ``\\uXXXX``."""
    out = []
    for char in value:
        if char in '"\\':
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _toml_key(name: str) -> str:
    bare = name and all(c.isascii() and (c.isalnum() or c in "-_") for c in name)
    return name if bare else _toml_string(name)
