"""Builders for MCP server packages (server.json, DESIGN §10) in tmp_path, for the upstream tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: A server written with nothing but the standard library: hand-written JSON-RPC over stdio.
#: ``CANARY`` (an absolute path, replaced by the test) is written the moment it starts.
STDLIB_SERVER = r"""
import json
import sys

CANARY = None  # set by the test
if CANARY:
    open(CANARY, "a").write("started\n")

TOOLS = [
    {
        "name": "add",
        "description": "Add two integers.",
        "inputSchema": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
        "annotations": {"readOnlyHint": True},
    }
]


def answer(msg_id, result):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg_id, "result": result}) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    msg = json.loads(line)
    method, msg_id = msg.get("method"), msg.get("id")
    if method == "initialize":
        answer(msg_id, {
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "stdlib", "version": "1"},
            "instructions": "Use add for sums.",
        })
    elif method == "tools/list":
        answer(msg_id, {"tools": TOOLS})
    elif method == "tools/call":
        args = msg["params"]["arguments"]
        if msg["params"]["name"] != "add":
            sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg_id,
                                         "error": {"code": -32602, "message": "no such tool"}}) + "\n")
            sys.stdout.flush()
            continue
        answer(msg_id, {"content": [{"type": "text", "text": str(args["a"] + args["b"])}], "isError": False})
    elif msg_id is not None:
        answer(msg_id, {})
"""


def server_manifest(name: str, /, **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": name,
        "description": f"A test MCP server ({name}).",
        "risk": "read",
        "server": {"command": ["python3", "server.py"], "network": False, "env": [], "timeout_s": 20},
    }
    data.update(overrides)
    return data


def make_server(
    root: Path,
    name: str,
    /,
    *,
    script: str = STDLIB_SERVER,
    canary: Path | None = None,
    extra_files: dict[str, bytes | str] | None = None,
    **overrides: Any,
) -> Path:
    """A server package ``root/name`` (server.json + server.py); ``canary``: the file the server
    writes when it starts (to prove nothing started it)."""
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "server.json").write_text(json.dumps(server_manifest(name, **overrides), indent=2))
    if canary is not None:
        script = script.replace("CANARY = None  # set by the test", f"CANARY = {str(canary)!r}")
    (folder / "server.py").write_text(script)
    for rel, content in (extra_files or {}).items():
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode() if isinstance(content, str) else content)
    return folder


FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "mcp"


def copy_server(fixture: str, root: Path, name: str | None = None, **overrides: Any) -> Path:
    """``fixtures/mcp/<fixture>`` copied to ``root/<name>`` (server.json renamed and overridden)."""
    name = name or fixture
    folder = root / name
    folder.mkdir(parents=True)
    for item in (FIXTURES / fixture).iterdir():
        if item.is_file():
            (folder / item.name).write_bytes(item.read_bytes())
    data = json.loads((folder / "server.json").read_text())
    data["name"] = name
    data.update(overrides)
    (folder / "server.json").write_text(json.dumps(data, indent=2))
    return folder
