"""ToolServer in-process: the working set as wire tools, call outcomes, notification hand-off."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_types import methods
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from toolkit import make_tool

from tooldir.mcp.server import LIST_ENVELOPE, ToolServer
from tooldir.policy import parse_policy
from tooldir.snapshot.loader import make_config

POLICY = '[defer]\nmode = "on"\nrules = ["NoDefer(echo_eager)", "Defer(*)"]\n'


@pytest.fixture
def front(tmp_path: Path) -> Iterator[ToolServer]:
    user = tmp_path / "user"
    make_tool(user, "echo_eager", description="Echo (eager).")
    make_tool(user, "weather_report", description="Weather forecast for a city.", keywords=["weather"])
    project = tmp_path / "project"
    project.mkdir()
    config = make_config(project=project, user_dirs=[user], policy=parse_policy(POLICY), state_dir=tmp_path / "s")
    server = ToolServer.open(config, watch=False)
    yield server
    server.close()


def test_listing_twice_reuses_the_rendered_wire_tools(front: ToolServer) -> None:
    first = front.list_tools_sync()
    second = front.list_tools_sync()
    assert [t["name"] for t in first] == ["echo_eager", "tool_search", "defer_execute_tool"]
    assert all(a is b for a, b in zip(first, second, strict=True))
    assert first[0]["inputSchema"]["type"] == "object"
    assert first[0]["annotations"] == {
        "readOnlyHint": True,
        "destructiveHint": False,
        "idempotentHint": True,
        "openWorldHint": False,
    }
    # defer_execute_tool can run any loaded tool: it is marked as dangerous as the worst of them
    assert first[2]["annotations"]["destructiveHint"] is True


@pytest.mark.both_rankers
def test_a_search_that_loads_tools_hands_a_list_changed_to_the_loop(front: ToolServer) -> None:
    scheduled: list[Any] = []

    class Portal:
        def start_task_soon(self, fn: Any) -> None:
            scheduled.append(fn)

    front.attach(Portal())  # type: ignore[arg-type]
    result = front.call_tool_sync("tool_search", {"queries": ["weather"]})
    assert result.is_error is False
    assert scheduled == [front.notifier.tools_changed]
    assert "weather_report" in [t["name"] for t in front.list_tools_sync()]

    missed = front.call_tool_sync("tool_search", {"queries": ["zzzzqqq"]})
    assert missed.is_error is False
    assert len(scheduled) == 1  # a miss changes nothing, so nothing is sent


def test_a_bug_inside_tooldir_is_an_is_error_result_not_a_protocol_error(
    front: ToolServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(front.session, "call", broken)
    result = front.call_tool_sync("echo_eager", {"text": "x"})
    assert result.is_error is True
    assert result.structured_content == {
        "error": {
            "code": "internal-error",
            "message": "tooldir failed while handling this call (see the server log); nothing was returned",
        }
    }


def test_a_negative_turn_idle_is_refused(front: ToolServer) -> None:
    with pytest.raises(ValueError, match="turn_idle_s"):
        ToolServer(store=front.store, registry=front.registry, session=front.session, turn_idle_s=-1)


@pytest.mark.parametrize("version", [*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS])
@pytest.mark.both_rankers
def test_the_cached_list_result_equals_the_sdks_own_shaping_for_every_protocol_version(
    front: ToolServer, version: str
) -> None:
    front.list_result_sync(version)  # shaped and cached before the search ...
    front.call_tool_sync("tool_search", {"queries": ["weather"]})  # ... then a deferred tool is loaded
    wire = front.list_tools_sync()
    expected = methods.serialize_server_result("tools/list", version, {"tools": wire, **LIST_ENVELOPE})
    assert front.list_result_sync(version) == expected
    assert front.list_result_sync(version) == expected  # and again from the per-version cache
    assert [t["name"] for t in expected["tools"]] == [
        "echo_eager",
        "tool_search",
        "defer_execute_tool",
        "weather_report",
    ]


def test_a_cancelled_call_keeps_its_slot_until_its_run_has_ended(front: ToolServer) -> None:
    """serve:starve: tools/call + notifications/cancelled pairs never get more runs going than the cap."""
    import threading

    import anyio
    from anyio.from_thread import BlockingPortal

    from tooldir.mcp.server import MAX_CONCURRENT_CALLS

    release = threading.Event()
    lock = threading.Lock()
    running = [0]
    most = [0]
    started = [0]

    def held_run(name: str, arguments: Any) -> Any:
        with lock:
            running[0] += 1
            started[0] += 1
            most[0] = max(most[0], running[0])
        try:
            assert release.wait(60), "the test never released the runs"
            return None
        finally:
            with lock:
                running[0] -= 1

    front.call_tool_sync = held_run  # type: ignore[method-assign]
    attempts = MAX_CONCURRENT_CALLS * 3

    async def attack() -> tuple[int, int]:
        async with BlockingPortal() as portal:
            front.attach(portal)
            for _ in range(attempts):  # one call, then its cancellation, as soon as the server holds it
                with anyio.CancelScope() as scope:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(front.call_tool, "echo_eager", {"text": "x"})
                        await anyio.wait_all_tasks_blocked()
                        scope.cancel()
            held = front.calls_running()
            await anyio.to_thread.run_sync(release.set)
            with anyio.fail_after(60):  # every slot comes back once the runs have ended
                while front.calls_running():
                    await anyio.sleep(0.01)
            front.detach()
            return held, started[0]

    held, runs = anyio.run(attack)
    assert most[0] == MAX_CONCURRENT_CALLS
    assert held == MAX_CONCURRENT_CALLS
    assert runs == MAX_CONCURRENT_CALLS  # the cancelled waiters never started a run
