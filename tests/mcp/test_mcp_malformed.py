"""Malformed JSON-RPC on `tooldir serve`'s stdin: every request gets an error answer with its id
(null for parse errors), and the server keeps serving. Raw bytes, no SDK client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from mcp_harness import ENV_KEYS, serve_args
from server_clock import read_line, wait_exit
from toolkit import make_tool

from tooldir.mcp.stdio import MAX_LINE, classify


class RawServer:
    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.buffer = bytearray()

    def send(self, message: bytes | dict[str, Any]) -> None:
        data = message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n"
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def receive(self) -> dict[str, Any]:
        """The next message on stdout, bounded by the server's CPU time (server_clock)."""
        answer: dict[str, Any] = json.loads(read_line(self.proc, self.buffer, "answer"))
        return answer

    def request(self, message: bytes | dict[str, Any]) -> dict[str, Any]:
        self.send(message)
        return self.receive()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawServer]:
    """One server for the whole module: malformed messages change nothing, and each test checks
    that it still answers (a fresh server per case would hide a server that only survives once)."""
    tmp_path = tmp_path_factory.mktemp("serve")
    user = tmp_path / "user"
    make_tool(user, "echo")
    (tmp_path / "project").mkdir()
    args = serve_args(
        project=tmp_path / "project", user_dirs=[user], state_dir=tmp_path / "state", log_file=tmp_path / "serve.log"
    )
    env = {k: os.environ[k] for k in ENV_KEYS if k in os.environ}
    proc = subprocess.Popen(
        [sys.executable, *args, "--no-watch"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
        env=env,
    )
    raw = RawServer(proc)
    try:
        init = raw.request(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            }
        )
        assert "result" in init, init
        raw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        yield raw
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        wait_exit(proc)
        if proc.stdout is not None:
            proc.stdout.close()


def still_serves(server: RawServer, request_id: int = 999) -> None:
    answer = server.request({"jsonrpc": "2.0", "id": request_id, "method": "tools/list", "params": {}})
    assert answer["id"] == request_id and "echo" in [t["name"] for t in answer["result"]["tools"]]
    assert server.proc.poll() is None


def call(request_id: int, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


DEEP = 100_000


@pytest.mark.parametrize(
    ("message", "code", "request_id"),
    [
        (call(11, "not-an-object"), -32602, 11),
        (call(12, ["echo"]), -32602, 12),
        (call(13, {"name": 5}), -32602, 13),
        (call(14, {}), -32602, 14),
        (
            b'{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"name":"echo","arguments":{"text":'
            + b"[" * DEEP
            + b"]" * DEEP
            + b"}}}\n",
            -32602,
            15,
        ),
        (b'{"jsonrpc":"2.0","id":16,"method":"tools/call","params":{"name":"\\udcff","arguments":{}}}\n', -32602, 16),
        (b'{"jsonrpc":"2.0","id":17,"method":"tools/call",\n', -32700, None),
        (b"not json at all\n", -32700, None),
        (b"[" * DEEP + b"]" * DEEP + b"\n", -32700, None),
        (b'[{"jsonrpc":"2.0","id":18,"method":"tools/list"}]\n', -32600, None),
        (b'{"jsonrpc":"2.0","id":{"x":1},"method":"tools/list"}\n', -32600, None),
        (b'{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}\n', -32600, None),
        (b'{"jsonrpc":"1.0","id":19,"method":"tools/list"}\n', -32600, 19),
        (b'{"jsonrpc":"2.0","id":20}\n', -32600, 20),
    ],
    ids=[
        "params-string",
        "params-array",
        "name-not-string",
        "no-name",
        "deep-params",
        "lone-surrogate-name",
        "truncated-json",
        "not-json",
        "deep-array",
        "batch",
        "object-id",
        "float-id",
        "wrong-version",
        "no-method",
    ],
)
def test_a_malformed_request_gets_a_json_rpc_error_with_its_id_and_the_server_stays_up(
    server: RawServer, message: bytes | dict[str, Any], code: int, request_id: int | None
) -> None:
    answer = server.request(message)
    assert answer["jsonrpc"] == "2.0" and answer["id"] == request_id
    assert answer["error"]["code"] == code and "result" not in answer
    still_serves(server)


def test_malformed_notifications_are_not_answered_and_do_not_stop_the_server(server: RawServer) -> None:
    server.send(b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":"x"}\n')
    server.send(b"\n   \n")
    still_serves(server, 998)  # the next answer on the wire is the tools/list one


def test_an_oversized_line_is_a_parse_error_and_the_next_request_works(server: RawServer) -> None:
    server.send(b'{"jsonrpc":"2.0","id":30,"method":"tools/list","params":{"pad":"' + b"x" * (MAX_LINE + 10) + b'"}}\n')
    answer = server.receive()
    assert answer["id"] is None and answer["error"]["code"] == -32700
    still_serves(server)


def test_a_valid_call_after_malformed_ones_runs_through_the_registry(server: RawServer) -> None:
    server.request(b"{bad\n")
    answer = server.request(call(40, {"name": "nope_tool", "arguments": {}}))
    assert answer["id"] == 40 and answer["result"]["isError"] is True
    assert answer["result"]["content"][0]["text"].startswith("error[unknown-tool]")


def test_classify_lets_through_exactly_what_the_sdk_parses() -> None:
    good = b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}\n'
    assert classify(good) == (good.decode(), None)
    assert classify(b"  \n") == (None, None)
    line, answer = classify(b'{"jsonrpc":"2.0","method":"tools/call","id":"a\\udcff","params":"x"}\n')
    assert line is None and answer is not None and answer["id"] is None  # an id that cannot be echoed


def test_while_serving_fd_0_reads_the_null_device_so_nothing_else_reads_the_protocol(server: RawServer) -> None:
    still_serves(server, 997)
    assert os.readlink(f"/proc/{server.proc.pid}/fd/0") == "/dev/null"
