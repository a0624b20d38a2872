"""Drive ``tooldir serve`` as a real subprocess with the official MCP SDK client.

``serve(...)`` starts ``python3 -m tooldir serve`` with the given roots over stdio and yields a
:class:`Served`: the SDK ``Client`` plus a stream of the ``tools/list_changed`` notifications it
received (on handshake-era connections straight off the wire, on 2026-07-28 connections through a
``subscriptions/listen`` stream opened for the test). Every wait is bounded.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

WAIT_S = 20.0  # generous bound for one event on a loaded 2-core CI machine

ENV_KEYS = ("HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "PATH", "TOOLDIR_REQUIRE_SANDBOX", "LANG", "TOOLDIR_SEMANTIC")


@dataclass
class Served:
    client: Client
    changes: MemoryObjectReceiveStream[str]
    log_file: Path
    stderr_file: Path
    marker: str
    received: list[str] = field(default_factory=list)

    async def list_names(self) -> list[str]:
        result = await self.client.list_tools(cache_mode="refresh")
        return [t.name for t in result.tools]

    async def tools(self) -> dict[str, types.Tool]:
        result = await self.client.list_tools(cache_mode="refresh")
        return {t.name: t for t in result.tools}

    async def next_change(self, timeout: float = WAIT_S) -> str:
        with anyio.fail_after(timeout):
            method = await self.changes.receive()
        self.received.append(method)
        return method

    async def no_change(self, within: float) -> bool:
        """True if no list_changed arrives within ``within`` seconds (a bounded wait)."""
        with anyio.move_on_after(within):
            await self.changes.receive()
            return False
        return True

    async def call(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        with anyio.fail_after(WAIT_S):
            return await self.client.call_tool(name, arguments)


def text_of(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


def error_code(result: types.CallToolResult) -> str | None:
    structured = result.structured_content
    if isinstance(structured, dict) and isinstance(structured.get("error"), dict):
        code = structured["error"].get("code")
        return code if isinstance(code, str) else None
    return None


def processes_mentioning(marker: str) -> list[int]:
    """PIDs of live processes whose command line mentions ``marker`` (a unique tmp path)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path("/proc", entry, "cmdline").read_bytes()
            state = Path("/proc", entry, "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(entry))
    return found


def serve_args(
    *,
    project: Path,
    user_dirs: Sequence[Path],
    state_dir: Path,
    policy: Path | None = None,
    log_file: Path,
    extra: Sequence[str] = (),
) -> list[str]:
    args = ["-m", "tooldir", "serve", "--project", str(project), "--state-dir", str(state_dir)]
    for d in user_dirs:
        args += ["--user-dir", str(d)]
    if policy is not None:
        args += ["--policy", str(policy)]
    args += ["--log-file", str(log_file), "--log-level", "info", *extra]
    return args


@asynccontextmanager
async def serve(
    tmp_path: Path,
    *,
    project: Path,
    user_dirs: Sequence[Path] = (),
    state_dir: Path | None = None,
    policy: Path | None = None,
    mode: str = "legacy",
    extra: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> AsyncIterator[Served]:
    state_dir = state_dir or tmp_path / "state"
    log_file = tmp_path / "serve.log"
    stderr_file = tmp_path / "serve.stderr"
    server_env = {k: os.environ[k] for k in ENV_KEYS if k in os.environ} | (env or {})
    params = StdioServerParameters(
        command=sys.executable,
        args=serve_args(
            project=project, user_dirs=user_dirs, state_dir=state_dir, policy=policy, log_file=log_file, extra=extra
        ),
        env=server_env,
        cwd=str(tmp_path),
    )
    send, receive = anyio.create_memory_object_stream[str](100)

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            await send.send(message.method)

    with send, receive, stderr_file.open("w") as errlog:
        # the server's stderr goes to a file the test can read; read_timeout bounds every request
        client = Client(
            stdio_client(params, errlog=errlog),
            mode=mode,  # type: ignore[arg-type]
            message_handler=on_message,
            read_timeout_seconds=WAIT_S,
        )
        async with client:
            served = Served(client, receive, log_file, stderr_file, marker=str(state_dir))
            if client.protocol_version.startswith("2026"):
                async with anyio.create_task_group() as tg, client.listen(tools_list_changed=True) as sub:

                    async def relay() -> None:
                        async for _event in sub:
                            await send.send("notifications/tools/list_changed")

                    tg.start_soon(relay)
                    yield served
                    tg.cancel_scope.cancel()
            else:
                yield served
