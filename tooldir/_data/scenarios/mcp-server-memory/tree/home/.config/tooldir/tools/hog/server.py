"""A hand-written (standard library only) MCP server over stdio, for the drill mcp:server-memory.

Its tool hold (offered as hog__hold) forks `children` processes that each fill `mb` MiB (every page written) and report
back; once all of them hold their memory it answers "held N x M MiB" and ends them. When a child
dies before it reports (the memory bound killed it) the server exits: nothing holds on. Started on
the host (never inside the sandbox) it writes the canary.
"""

import json
import os
import signal
import sys

try:  # a hostile script is a canary: this path exists only outside the sandbox
    with open("{canary}", "w") as fh:
        fh.write("started on the host")
except OSError:
    pass

TOOLS = [
    {
        "name": "hold",
        "description": "Hold memory in several processes at once.",
        "inputSchema": {
            "type": "object",
            "properties": {"children": {"type": "integer"}, "mb": {"type": "integer"}},
        },
    }
]


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def hold(children, mb):
    pids, pipes = [], []
    for _ in range(children):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            block = b"\x01" * (mb * 1024 * 1024)  # every page written: resident, charged
            os.write(write, b"k")
            signal.pause()
            os._exit(len(block) and 0)
        os.close(write)
        pids.append(pid)
        pipes.append(read)
    held = sum(1 for read in pipes if os.read(read, 1) == b"k")
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass
    if held < children:
        os._exit(3)  # a child was killed before it held its memory: the server gives up
    return f"held {held} x {mb} MiB"


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
                    "serverInfo": {"name": "hog", "version": "1"},
                },
            }
        )
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": msg_id, "result": {"tools": TOOLS}})
    elif method == "tools/call":
        args = msg["params"].get("arguments") or {}
        text = hold(int(args.get("children", 1)), int(args.get("mb", 1)))
        send({"jsonrpc": "2.0", "id": msg_id, "result": {"content": [{"type": "text", "text": text}]}})
    elif msg_id is not None:
        send({"jsonrpc": "2.0", "id": msg_id, "result": {}})
