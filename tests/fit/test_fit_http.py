"""Issue 17 item 4: ``tooldir serve --http HOST:PORT --token-file FILE`` (Streamable HTTP), from a
plain install: the SDK's HTTP client lists and calls tools with the bearer token; raw requests
(http.client) without it, with another Host or another Origin are refused; a missing, empty or
group/world-readable token file, or a non-loopback address without the opt-in, never starts a server."""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from plaininstall import PlainInstall
from toolkit import make_tool

TOKEN = "t0k3n-" + "x" * 40
READY = re.compile(r"MCP over HTTP at (http://127\.0\.0\.1:(\d+)/mcp)")


@dataclass
class Running:
    url: str
    port: int
    proc: subprocess.Popen[str]
    stderr: Path


def _token_file(folder: Path, text: str = TOKEN + "\n", mode: int = 0o600) -> Path:
    path = folder / "token"
    path.write_text(text)
    path.chmod(mode)
    return path


def _start(plain: PlainInstall, elsewhere: Path, *, watch: bool) -> Iterator[Running]:
    user = elsewhere / "user-tools"
    make_tool(user, "echo_text")
    stderr = elsewhere / "serve.stderr"
    argv = [plain.tooldir, "serve", "--http", "127.0.0.1:0", "--token-file", str(_token_file(elsewhere))]
    argv += ["--user-dir", "user-tools", "--state-dir", str(elsewhere / "state")]
    if not watch:
        argv.append("--no-watch")
    env = dict(plain.env)
    if os.environ.get("TOOLDIR_REQUIRE_SANDBOX"):
        env["TOOLDIR_REQUIRE_SANDBOX"] = os.environ["TOOLDIR_REQUIRE_SANDBOX"]
    with stderr.open("w") as err:
        proc = subprocess.Popen(argv, cwd=elsewhere, env=env, stdout=subprocess.DEVNULL, stderr=err, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (found := READY.search(stderr.read_text())):
            assert proc.poll() is None, stderr.read_text()
            assert time.monotonic() < deadline, "the server never said it was ready"
            time.sleep(0.05)
        yield Running(found.group(1), int(found.group(2)), proc, stderr)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture
def served(plain: PlainInstall, elsewhere: Path) -> Iterator[Running]:
    yield from _start(plain, elsewhere, watch=False)


@pytest.fixture
def watched(plain: PlainInstall, elsewhere: Path) -> Iterator[Running]:
    yield from _start(plain, elsewhere, watch=True)


def _raw(port: int, headers: dict[str, str], *, body: bytes | None = None) -> tuple[int, dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        conn.putrequest("POST", "/mcp", skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items():
            conn.putheader(name, value)
        payload = body if body is not None else b"{}"
        conn.putheader("Content-Length", str(len(payload)))
        conn.endheaders(payload)
        response = conn.getresponse()
        response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}
    finally:
        conn.close()


async def _list_and_call(url: str, token: str) -> tuple[list[str], str]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    async with http, Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
        with anyio.fail_after(30):
            names = [t.name for t in (await client.list_tools()).tools]
            result = await client.call_tool("echo_text", {"text": "over http"})
        text = "".join(getattr(c, "text", "") for c in result.content)
        assert not result.is_error, text
        return names, text


def test_the_sdk_http_client_lists_and_calls_tools_with_the_bearer_token(served: Running) -> None:
    names, text = anyio.run(_list_and_call, served.url, TOKEN)
    assert "echo_text" in names
    assert json.loads(text) == {"text": "over http"}


async def _two_clients_see_a_new_tool(url: str, user_root: Path) -> list[str]:
    changed = anyio.Event()
    seen: list[str] = []

    def handler(who: str) -> Any:
        async def on_message(message: Any) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                seen.append(who)
                if {"a", "b"} <= set(seen):
                    changed.set()

        return on_message

    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http_a,
        httpx2.AsyncClient(headers=headers, timeout=30) as http_b,
        Client(streamable_http_client(url, http_client=http_a), mode="legacy", message_handler=handler("a")) as a,
        Client(streamable_http_client(url, http_client=http_b), mode="legacy", message_handler=handler("b")) as b,
    ):
        with anyio.fail_after(60):
            await a.list_tools()
            await b.list_tools()
            make_tool(user_root, "new_tool")
            await changed.wait()
            names = [t.name for t in (await b.list_tools(cache_mode="refresh")).tools]
    assert "new_tool" in names
    return sorted(set(seen))


def test_every_http_client_is_told_when_the_tool_list_changes(watched: Running, elsewhere: Path) -> None:
    assert anyio.run(_two_clients_see_a_new_tool, watched.url, elsewhere / "user-tools") == ["a", "b"]


def test_a_request_without_the_right_bearer_token_gets_401(served: Running) -> None:
    host = {"Host": f"127.0.0.1:{served.port}", "Content-Type": "application/json"}
    for auth in ({}, {"Authorization": "Bearer wrong-token-of-some-length"}, {"Authorization": f"Basic {TOKEN}"}):
        status, headers = _raw(served.port, host | auth)
        assert status == 401, auth
        assert headers["www-authenticate"].startswith("Bearer")
    status, _ = _raw(served.port, host | {"Authorization": f"Bearer {TOKEN[:-1]}"})
    assert status == 401


def test_a_host_or_origin_that_is_not_the_bound_address_is_refused(served: Running) -> None:
    good = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    for host in ("evil.example", f"evil.example:{served.port}", f"localhost:{served.port}", "127.0.0.1:1"):
        status, _ = _raw(served.port, good | {"Host": host})
        assert status == 421, host
    here = {"Host": f"127.0.0.1:{served.port}"}
    for origin in ("http://evil.example", f"http://localhost:{served.port}", "null"):
        status, _ = _raw(served.port, good | here | {"Origin": origin})
        assert status == 403, origin
    # the right Host, Origin and token reach the SDK (which then judges the JSON-RPC body)
    status, _ = _raw(served.port, good | here | {"Origin": f"http://127.0.0.1:{served.port}"})
    assert status not in (401, 403, 421)


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ("missing", "No such file"),
        ("empty", "empty"),
        ("world-readable", "chmod 600"),
        ("group-readable", "chmod 600"),
        ("short", "fewer than 16"),
        ("no-token-file", "needs --token-file"),
        ("remote", "not a loopback address"),
    ],
)
def test_the_server_refuses_to_start_without_a_usable_token_file_or_on_a_non_loopback_address(
    plain: PlainInstall, elsewhere: Path, setup: str, expected: str
) -> None:
    bind = "127.0.0.1:0"
    extra = ["--token-file", "token"]
    if setup == "missing":
        pass
    elif setup == "empty":
        _token_file(elsewhere, "\n")
    elif setup == "world-readable":
        _token_file(elsewhere, mode=0o604)
    elif setup == "group-readable":
        _token_file(elsewhere, mode=0o640)
    elif setup == "short":
        _token_file(elsewhere, "abc\n")
    elif setup == "no-token-file":
        extra = []
    elif setup == "remote":
        _token_file(elsewhere)
        bind = "0.0.0.0:0"
    done = plain.run([plain.tooldir, "serve", "--http", bind, *extra, "--no-watch"], elsewhere, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("tooldir serve: ") and expected in done.stderr
    assert "Traceback" not in done.stderr and "MCP over HTTP at" not in done.stderr


def test_sigterm_stops_the_http_server_cleanly(served: Running) -> None:
    served.proc.terminate()
    assert served.proc.wait(timeout=30) == 0
    text = served.stderr.read_text()
    assert "Traceback" not in text
    with pytest.raises(OSError):
        http.client.HTTPConnection("127.0.0.1", served.port, timeout=5).connect()


async def _stop_while_connected(url: str, proc: subprocess.Popen[str]) -> float:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    async with http, Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
        with anyio.fail_after(30):
            await client.list_tools()
        started = time.monotonic()
        proc.terminate()
        await anyio.to_thread.run_sync(lambda: proc.wait(timeout=60))
        return time.monotonic() - started


def test_sigterm_stops_the_server_promptly_while_a_client_is_connected(served: Running) -> None:
    seconds = anyio.run(_stop_while_connected, served.url, served.proc)
    assert served.proc.returncode == 0
    assert seconds < 30
