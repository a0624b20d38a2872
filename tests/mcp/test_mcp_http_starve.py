"""serve:starve over HTTP: a bounded attack against our own ``tooldir serve --http`` on 127.0.0.1.

The server runs as a subprocess with a small descriptor limit (soft 64, hard 320: it raises the
soft one to 320 at start, and then holds at most 64 connections), so a few hundred connections
are an attack. Every connection trickles a partial request, one byte per second; one sends whole
headers with the token and trickles its body. While they trickle, the owner's request with the
token is answered; every trickling connection is closed by the server (room made for newer
ones, or its request deadline); the log stays small and holds no traceback."""

from __future__ import annotations

import http.client
import json
import os
import re
import selectors
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from toolkit import make_tool

from tooldir.mcp.http import REQUEST_DEADLINE_S, connection_cap

TOKEN = "owner-" + "k" * 40
READY = re.compile(r"MCP over HTTP at http://127\.0\.0\.1:(\d+)/mcp")
ATTACKERS = 300
SOFT, HARD = 64, 320
WAIT_S = 60.0  # generous bound for one awaited event on a loaded machine
LOG_BOUND = 64 * 1024
ENV_KEYS = ("HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "PATH", "TOOLDIR_REQUIRE_SANDBOX", "LANG")


#: The server starts with the small descriptor limit (set, then exec'd into ``python -m tooldir``).
LOW_LIMIT = (
    f"import os, resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, ({SOFT}, {HARD})); "
    "os.execv(sys.executable, [sys.executable, '-m', 'tooldir', *sys.argv[1:]])"
)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    user = tmp_path / "user-tools"
    make_tool(user, "echo_text")
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    log_file = tmp_path / "serve.log"
    stderr = tmp_path / "serve.stderr"
    argv = [sys.executable, "-c", LOW_LIMIT, "serve", "--http", "127.0.0.1:0", "--token-file", str(token)]
    argv += ["--user-dir", str(user), "--state-dir", str(tmp_path / "state"), "--no-watch"]
    argv += ["--log-level", "info", "--log-file", str(log_file)]
    env = {k: os.environ[k] for k in ENV_KEYS if k in os.environ}
    with stderr.open("w") as err:
        proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + WAIT_S
        while not (found := READY.search(stderr.read_text())):
            assert proc.poll() is None, stderr.read_text()
            assert time.monotonic() < deadline, "the server never said it was ready"
            time.sleep(0.05)
        yield int(found.group(1)), log_file
        assert proc.poll() is None, "the server died during the attack: " + stderr.read_text()[-2000:]
    finally:
        proc.terminate()
        proc.wait(timeout=WAIT_S)


def _owner_initialize(port: int) -> int:
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "owner", "version": "0"}}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT_S)
    try:
        conn.request(
            "POST",
            "/mcp",
            body=body,
            headers={
                "Authorization": f"Bearer {TOKEN}",
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
            },
        )
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


class Trickler:
    """Connections that each send a partial request and then one more byte per round."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.socks: list[socket.socket] = []
        self.closed: set[int] = set()
        self.sel = selectors.DefaultSelector()

    def open(self, count: int, head: bytes) -> None:
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=WAIT_S)
            sock.sendall(head)
            sock.setblocking(False)
            self.sel.register(sock, selectors.EVENT_READ, len(self.socks))
            self.socks.append(sock)

    def round(self, byte: bytes = b"a") -> None:
        """One byte on every open connection, then note the ones the server closed."""
        for index, sock in enumerate(self.socks):
            if index not in self.closed:
                try:
                    sock.send(byte)
                except OSError:
                    self._close(index)
        for key, _ in self.sel.select(0):
            try:
                data = key.fileobj.recv(4096)  # type: ignore[union-attr]
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data or b"408" in data or b"HTTP/1.1" in data:
                self._close(key.data)

    def _close(self, index: int) -> None:
        if index not in self.closed:
            self.closed.add(index)
            self.sel.unregister(self.socks[index])
            self.socks[index].close()

    def all_closed(self) -> bool:
        return len(self.closed) == len(self.socks)

    def close(self) -> None:
        for index in range(len(self.socks)):
            self._close(index)
        self.sel.close()


def test_trickling_connections_never_starve_the_owner_and_are_all_closed_with_a_small_log(
    server: tuple[int, Path],
) -> None:
    port, log_file = server
    attack = Trickler(port)
    try:
        attack.open(ATTACKERS, f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: ".encode())
        body_head = (
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
            "Content-Length: 100000\r\n\r\n{"
        ).encode()
        attack.open(1, body_head)  # the token's whole headers, then a body one byte a round
        attack.round()
        assert _owner_initialize(port) == 200  # while every trickler still trickles
        deadline = time.monotonic() + REQUEST_DEADLINE_S + WAIT_S
        while not attack.all_closed():
            assert time.monotonic() < deadline, (
                f"{len(attack.socks) - len(attack.closed)} trickling connection(s) still open after "
                f"{REQUEST_DEADLINE_S + WAIT_S:g} s"
            )
            time.sleep(1.0)  # the attack's own pace: one byte a second
            attack.round()
        assert _owner_initialize(port) == 200
    finally:
        attack.close()
    log = log_file.read_text()
    assert "raised the soft descriptor limit (RLIMIT_NOFILE) from 64 to 320" in log
    assert f"HTTP limits: {connection_cap(HARD)} open connections" in log
    assert "closed the oldest one not being served" in log
    assert "its request had not arrived whole within" in log
    assert "Traceback" not in log
    assert len(log.encode()) < LOG_BOUND, f"{len(log.encode())} bytes of log"
