"""Drive ``tooldir serve`` as a real subprocess with the official MCP SDK client.

``serve(...)`` starts ``python3 -m tooldir serve`` with the given roots over stdio and yields a
:class:`Served`: the SDK ``Client`` plus a stream of the ``tools/list_changed`` notifications it
received (on handshake-era connections straight off the wire, on 2026-07-28 connections through a
``subscriptions/listen`` stream opened for the test). Every wait is bounded by the server's own
CPU time (:mod:`server_clock`): a request, a notification, the ``initialize`` answer and the
server's exit once the client hangs up.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp.client.stdio as sdk_stdio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from server_clock import ANSWER_CPU_S, SLICE_S, WALL_BACKSTOP_S, cpu_seconds, process_state

ENV_KEYS = ("HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "PATH", "TOOLDIR_REQUIRE_SANDBOX", "LANG", "TOOLDIR_SEMANTIC")


class ServerWatch:
    """Fails the served test once the server has spent ANSWER_CPU_S of its own CPU time (or the
    wall backstop has passed) on something the test is waiting for, naming what and what was seen.
    The server is the child of this process whose command line holds ``marker``."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.pid: int | None = None
        self.waiting: dict[str, tuple[float, float]] = {}  # what -> (wall, server CPU) at the start
        self.stuck: str | None = None

    def server_pid(self) -> int | None:
        if self.pid is None:
            mine = [p for p in processes_mentioning(self.marker) if _parent(p) == os.getpid()]
            self.pid = mine[0] if mine else None
        return self.pid

    def cpu(self) -> float:
        pid = self.server_pid()
        return 0.0 if pid is None else cpu_seconds(pid)  # before the server exists: none spent yet

    @contextmanager
    def awaiting(self, what: str) -> Iterator[None]:
        self.waiting[what] = (time.monotonic(), self.cpu())
        try:
            yield
        finally:
            del self.waiting[what]

    async def run(self, scope: anyio.CancelScope) -> None:
        while self.stuck is None:
            await anyio.sleep(SLICE_S)
            for what, (wall, cpu) in list(self.waiting.items()):
                used, took = self.cpu() - cpu, time.monotonic() - wall
                if used >= ANSWER_CPU_S or took >= WALL_BACKSTOP_S:
                    state = "not started" if self.pid is None else process_state(self.pid)
                    self.stuck = (
                        f"tooldir serve: no {what} after {took:.1f} s wall and {used:.1f} s of the server's CPU "
                        f"time (server state: {state})"
                    )
                    if self.pid is not None:  # stuck: end it, so that no wait of the SDK's outlasts it
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(self.pid, signal.SIGKILL)
                    scope.cancel()


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


@dataclass
class Served:
    client: Client
    changes: MemoryObjectReceiveStream[str]
    log_file: Path
    stderr_file: Path
    marker: str
    watch: ServerWatch
    received: list[str] = field(default_factory=list)

    async def list_names(self) -> list[str]:
        return list(await self.tools())

    async def tools(self) -> dict[str, types.Tool]:
        with self.watch.awaiting("answer to tools/list"):
            result = await self.client.list_tools(cache_mode="refresh")
        return {t.name: t for t in result.tools}

    async def next_change(self) -> str:
        with self.watch.awaiting("tools/list_changed notification"):
            method = await self.changes.receive()
        self.received.append(method)
        return method

    async def until(self, what: str, predicate: Callable[[], bool]) -> None:
        """Wait until ``predicate()`` holds (looked at every 50 ms), bounded as every wait here."""
        with self.watch.awaiting(what):
            while not predicate():
                await anyio.sleep(0.05)

    async def no_change(self, within: float) -> bool:
        """True if no list_changed arrives within ``within`` seconds (a bounded wait)."""
        with anyio.move_on_after(within):
            await self.changes.receive()
            return False
        return True

    async def call(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        with self.watch.awaiting(f"answer to tools/call {name}"):
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

    watch = ServerWatch(str(state_dir))
    with send, receive, stderr_file.open("w") as errlog, _sdk_waits_for_exit():
        # the server's stderr goes to a file the test can read; the watch bounds every wait, and
        # the SDK's own per-request timeout is only the wall backstop
        client = Client(
            stdio_client(params, errlog=errlog),
            mode=mode,  # type: ignore[arg-type]
            message_handler=on_message,
            read_timeout_seconds=WALL_BACKSTOP_S,
        )
        async with anyio.create_task_group() as guard:
            guard.start_soon(watch.run, guard.cancel_scope)
            async with AsyncExitStack() as stack:
                with watch.awaiting("answer to initialize"):
                    await stack.enter_async_context(client)
                served = Served(client, receive, log_file, stderr_file, marker=str(state_dir), watch=watch)
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
                watch.waiting["exit once the client hung up"] = (time.monotonic(), watch.cpu())
            guard.cancel_scope.cancel()
        if watch.stuck is not None:
            raise AssertionError(watch.stuck)


@contextmanager
def _sdk_waits_for_exit() -> Iterator[None]:
    """The SDK's client closes the server's stdin and sends SIGTERM 2 s later: on a loaded machine
    a server still shutting down by itself would be signalled, and the test would see a signal's
    shutdown, not the hang-up's. Here the SDK waits up to the wall backstop, and the watch fails a
    server that spends ANSWER_CPU_S of CPU time without exiting."""
    saved = sdk_stdio.PROCESS_TERMINATION_TIMEOUT
    sdk_stdio.PROCESS_TERMINATION_TIMEOUT = WALL_BACKSTOP_S
    try:
        yield
    finally:
        sdk_stdio.PROCESS_TERMINATION_TIMEOUT = saved
