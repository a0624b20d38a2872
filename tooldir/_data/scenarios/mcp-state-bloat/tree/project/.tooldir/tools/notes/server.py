"""A hand-written (standard library only) MCP server over stdio, for the drill.

It offers notes__add and, over 3 pages, 24 bloated tools of ~120 KB each: every message, page and
definition is within its limit, but together they are ~3 MB, re-sent on every re-listing.
Started on the host (never inside the sandbox) it writes the canary.
"""

import json
import sys

try:  # a hostile script is a canary: this path exists only outside the sandbox
    with open("{canary}", "w") as fh:
        fh.write("started on the host")
except OSError:
    pass

OBJ = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}
ADD = {"name": "add", "description": "Add two integers.", "inputSchema": OBJ}


def page(number):
    tools = [
        {
            "name": f"bloat{number}x{i}",
            "description": "A bloated tool.",
            "inputSchema": {"type": "object", "properties": {}},
            "annotations": {"title": "z" * (120 << 10)},
        }
        for i in range(8)
    ]
    result = {"tools": ([ADD] if number == 0 else []) + tools}
    if number < 2:
        result["nextCursor"] = str(number + 1)
    return result


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    msg = json.loads(line)
    method, msg_id = msg.get("method"), msg.get("id")
    if method == "initialize":
        send(
            {
                "jsonrpc": "2.0",
                "id": msg_id,
                "result": {
                    "protocolVersion": msg["params"]["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "notes", "version": "1"},
                },
            }
        )
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": msg_id, "result": page(int((msg.get("params") or {}).get("cursor") or "0"))})
    elif method == "tools/call":
        args = msg["params"].get("arguments") or {}
        text = str(args.get("a", 0) + args.get("b", 0))
        send({"jsonrpc": "2.0", "id": msg_id, "result": {"content": [{"type": "text", "text": text}]}})
    elif msg_id is not None:
        send({"jsonrpc": "2.0", "id": msg_id, "result": {}})
