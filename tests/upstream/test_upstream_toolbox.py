"""tooldir.open(upstream=True) starts the trusted MCP server packages and offers their tools through
the toolbox's registry; without it no server is started (issue 25 item 1)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from harness import server_policy
from servertools import copy_server
from shared_helpers import require_sandbox

import tooldir


@pytest.fixture(autouse=True)
def _sandbox() -> None:
    require_sandbox()


def test_open_with_upstream_calls_a_trusted_server_packages_tool_and_close_stops_it(tmp_path: Path, root: Path) -> None:
    copy_server("misbehaving", root, "calc")
    before = set(threading.enumerate())
    with tooldir.open(
        project=None, user_dirs=[root], policy=server_policy(), state_dir=tmp_path / "state", upstream=True
    ) as toolbox:
        assert toolbox.hub is not None and toolbox.start_problems == {}
        result = toolbox.call("calc__add", {"a": 2, "b": 40})
        session_result = toolbox.session().call("calc__add", {"a": 1, "b": 1})
    assert (result.ok, result.content) == (True, "42")
    assert session_result.ok
    started = [t for t in set(threading.enumerate()) - before if t.is_alive()]
    # AnyIO's pooled worker threads are told to stop when the hub's event loop closes and end a
    # moment later, on their own: those are waited for (joined, with a cap); any other thread
    # close() must have ended already (stress round 3: an AnyIO worker still ending was counted)
    assert [t.name for t in started if t.name != "AnyIO worker thread"] == []
    for thread in started:
        thread.join(timeout=60)
    assert [t.name for t in started if t.is_alive()] == []


def test_open_without_upstream_starts_no_server_and_the_tool_is_unknown(tmp_path: Path, root: Path) -> None:
    copy_server("misbehaving", root, "calc")
    with tooldir.open(project=None, user_dirs=[root], policy=server_policy(), state_dir=tmp_path / "state") as box:
        assert box.hub is None
        result = box.call("calc__add", {"a": 2, "b": 40})
    assert result.error is not None and result.error.code == "unknown-tool"
