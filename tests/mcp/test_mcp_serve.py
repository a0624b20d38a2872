"""``tooldir serve`` end to end: a real subprocess driven by the official MCP SDK stdio client."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
import server_clock
from mcp_harness import error_code, processes_mentioning, serve, text_of
from server_clock import communicate, read_until_id, wait_exit
from toolkit import make_tool, project_tools

pytestmark = pytest.mark.anyio

TEST_BOUND_S = 120  # one whole scenario, including server start and shutdown

POLICY = """
[defer]
mode = "on"
rules = ["NoDefer(echo_eager)", "Defer(*)"]
"""

PROBE_SCRIPT = """\
import json, os, sys
request = json.load(sys.stdin)
home = request["input"]["home"]
print(json.dumps({"ok": True, "content": {
    "secret": os.environ.get("TOOLDIR_TEST_SECRET"),
    "home_visible": os.path.exists(home),
    "uid": os.getuid(),
    "echo": request["input"]["text"],
}}))
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    user = tmp_path / "user_tools"
    user.mkdir()
    make_tool(user, "echo_eager", description="Echo text back (always listed).", keywords=["echo"])
    make_tool(
        user,
        "weather_report",
        description="Get the weather forecast for a city.",
        keywords=["weather", "forecast", "city"],
        input_schema={
            "type": "object",
            "properties": {"text": {"type": "string"}, "home": {"type": "string"}},
            "required": ["text", "home"],
            "additionalProperties": False,
        },
        script=PROBE_SCRIPT,
    )
    make_tool(user, "invoice_export", description="Export an invoice as PDF.", keywords=["invoice"], risk="write")
    project = tmp_path / "project"
    project.mkdir()
    make_tool(project_tools(project), "project_tool", description="A project tool nobody approved.")
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    return {"user": user, "project": project, "policy": policy, "tmp": tmp_path}


async def test_client_lists_the_working_set_with_risk_hints_and_only_eager_and_guard_tools(
    tree: dict[str, Path],
) -> None:
    with anyio.fail_after(TEST_BOUND_S):
        async with serve(tree["tmp"], project=tree["project"], user_dirs=[tree["user"]], policy=tree["policy"]) as s:
            assert s.client.server_capabilities.tools is not None
            assert s.client.server_capabilities.tools.list_changed is True
            tools = await s.tools()
            assert "echo_eager" in tools
            assert "tool_search" in tools
            # deferred and pending tools are not in the working set
            assert "weather_report" not in tools
            assert "invoice_export" not in tools
            assert "project_tool" not in tools
            eager = tools["echo_eager"]
            assert eager.input_schema["required"] == ["text"]
            assert eager.annotations is not None
            assert eager.annotations.read_only_hint is True
            assert eager.annotations.destructive_hint is False
            assert eager.annotations.open_world_hint is False


@pytest.mark.both_rankers
async def test_tool_search_loads_a_deferred_tool_sends_list_changed_and_the_tool_runs_in_the_sandbox(
    tree: dict[str, Path],
) -> None:
    home = os.environ["HOME"]
    assert os.path.isdir(home)  # visible here, so "not visible" below is the sandbox's doing
    secret = {"TOOLDIR_TEST_SECRET": "hunter2"}
    with anyio.fail_after(TEST_BOUND_S):
        async with serve(
            tree["tmp"], project=tree["project"], user_dirs=[tree["user"]], policy=tree["policy"], env=secret
        ) as s:
            found = await s.call("tool_search", {"queries": ["weather forecast"]})
            assert found.is_error is False, text_of(found)
            assert "weather_report" in text_of(found)
            assert await s.next_change() == "notifications/tools/list_changed"
            tools = await s.tools()
            assert "weather_report" in tools
            assert "invoice_export" not in tools  # only what matched was loaded

            result = await s.call("weather_report", {"text": "hi", "home": home})
            assert result.is_error is False, text_of(result)
            content = result.structured_content
            assert isinstance(content, dict)
            assert content["echo"] == "hi"
            assert content["secret"] is None  # the server has it; the sandbox's environment is scrubbed
            assert content["home_visible"] is False  # no access to the user's home
            assert result.meta is not None
            assert result.meta.get("tooldir/audit_id")


@pytest.mark.both_rankers
async def test_a_deferred_tool_not_loaded_is_refused_with_a_hint_to_search(tree: dict[str, Path]) -> None:
    with anyio.fail_after(TEST_BOUND_S):
        async with serve(tree["tmp"], project=tree["project"], user_dirs=[tree["user"]], policy=tree["policy"]) as s:
            result = await s.call("invoice_export", {"text": "x"})
            assert result.is_error is True
            assert error_code(result) == "session:unloaded"
            assert "tool_search" in text_of(result)
            # a refusal changes nothing the client sees
            assert await s.no_change(within=0.5)


async def test_a_pending_project_tool_is_refused_as_not_approved_and_never_runs(tree: dict[str, Path]) -> None:
    canary = tree["tmp"] / "canary"
    make_tool(
        project_tools(tree["project"]),
        "project_tool",
        description="A project tool nobody approved.",
        script=f"open({str(canary)!r}, 'w').write('ran')\n",
    )
    with anyio.fail_after(TEST_BOUND_S):
        async with serve(tree["tmp"], project=tree["project"], user_dirs=[tree["user"]], policy=tree["policy"]) as s:
            result = await s.call("project_tool", {"text": "x"})
            assert result.is_error is True
            assert error_code(result) == "not-active"
            assert "not-approved" in text_of(result)
    assert not canary.exists()


async def test_an_unknown_tool_is_an_error_result_not_a_protocol_error(tree: dict[str, Path]) -> None:
    with anyio.fail_after(TEST_BOUND_S):
        async with serve(tree["tmp"], project=tree["project"], user_dirs=[tree["user"]], policy=tree["policy"]) as s:
            result = await s.call("no_such_tool", {})
            assert result.is_error is True
            assert error_code(result) == "unknown-tool"
            assert "tool_search" in text_of(result)
            # the connection still works afterwards
            assert "echo_eager" in await s.list_names()


@pytest.mark.both_rankers
async def test_changing_a_listed_tool_on_disk_sends_list_changed_and_the_new_schema_is_listed(
    tree: dict[str, Path],
) -> None:
    with anyio.fail_after(TEST_BOUND_S):
        async with serve(tree["tmp"], project=tree["project"], user_dirs=[tree["user"]], policy=tree["policy"]) as s:
            before = await s.tools()
            assert before["echo_eager"].description == "Echo text back (always listed)."
            make_tool(tree["user"], "echo_eager", description="Echo text back, now changed.", keywords=["echo"])
            assert await s.next_change() == "notifications/tools/list_changed"
            after = await s.tools()
            assert after["echo_eager"].description == "Echo text back, now changed."


@pytest.mark.both_rankers
async def test_a_change_to_a_tool_outside_the_working_set_sends_no_list_changed(tree: dict[str, Path]) -> None:
    with anyio.fail_after(TEST_BOUND_S):
        async with serve(tree["tmp"], project=tree["project"], user_dirs=[tree["user"]], policy=tree["policy"]) as s:
            names = await s.list_names()
            make_tool(tree["user"], "invoice_export", description="Export an invoice as CSV.", risk="write")
            # bounded: longer than the watcher's debounce and rebuild
            assert await s.no_change(within=3.0)
            assert await s.list_names() == names


@pytest.mark.both_rankers
async def test_the_2026_protocol_gets_list_changed_through_subscriptions_listen(tree: dict[str, Path]) -> None:
    with anyio.fail_after(TEST_BOUND_S):
        async with serve(
            tree["tmp"], project=tree["project"], user_dirs=[tree["user"]], policy=tree["policy"], mode="auto"
        ) as s:
            assert s.client.protocol_version.startswith("2026")
            found = await s.call("tool_search", {"tool_names": ["invoice_export"]})
            assert found.is_error is False, text_of(found)
            assert await s.next_change() == "notifications/tools/list_changed"
            tools = await s.tools()
            assert tools["invoice_export"].annotations is not None
            assert tools["invoice_export"].annotations.destructive_hint is True


@pytest.mark.both_rankers
async def test_shutdown_is_clean_and_leaves_no_processes(tree: dict[str, Path]) -> None:
    with anyio.fail_after(TEST_BOUND_S):
        async with serve(tree["tmp"], project=tree["project"], user_dirs=[tree["user"]], policy=tree["policy"]) as s:
            marker = s.marker
            assert processes_mentioning(marker), "the server process should be visible while serving"
            result = await s.call("echo_eager", {"text": "bye"})
            assert result.is_error is False, text_of(result)
        log_text = s.log_file.read_text()
        stderr_text = s.stderr_file.read_text()
    assert processes_mentioning(marker) == []
    assert "shut down cleanly" in log_text
    assert "Traceback" not in stderr_text
    assert "Traceback" not in log_text


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--project", "/nonexistent/dir"], "not a directory"),
        (["--policy", "/nonexistent/policy.toml"], "cannot read policy"),
        (["--turn-idle", "-1"], "--turn-idle must be between 0 and 86400"),
        (["--json"], "--json does not apply"),
        (["--log-file", "/nonexistent/dir/serve.log"], "--log-file /nonexistent/dir/serve.log"),
    ],
    ids=["missing-project", "missing-policy", "negative-turn-idle", "json", "unwritable-log"],
)
def test_bad_configuration_exits_2_with_a_diagnostic_before_speaking_mcp(
    tmp_path: Path, args: list[str], expected: str
) -> None:
    proc = server_clock.run(
        [sys.executable, "-m", "tooldir", "serve", "--state-dir", str(tmp_path / "s"), *args], cwd=tmp_path
    )
    assert proc.returncode == 2
    assert proc.stdout == b""
    assert expected in proc.stderr.decode()
    assert b"Traceback" not in proc.stderr


def test_module_entry_point_runs_the_cli(tmp_path: Path) -> None:
    proc = server_clock.run([sys.executable, "-m", "tooldir", "serve", "--help"], cwd=tmp_path)
    assert proc.returncode == 0
    assert "--no-watch" in proc.stdout.decode()


APPROVAL_POLICY = """
[defer]
mode = "on"
rules = ["NoDefer(echo_eager)", "NoDefer(project_tool)", "Defer(*)"]
"""


def _allow(project: Path, package: Path, state_dir: Path, policy: Path) -> None:
    proc = server_clock.run(
        [
            *(sys.executable, "-m", "tooldir", "allow", str(package), "--yes", "--project", str(project)),
            *("--state-dir", str(state_dir), "--policy", str(policy), "--json"),
        ]
    )
    assert proc.returncode == 0, proc.stderr.decode()


@pytest.mark.both_rankers
async def test_approving_then_changing_a_project_tool_sends_list_changed_each_time(tree: dict[str, Path]) -> None:
    policy = tree["tmp"] / "approval.toml"
    policy.write_text(APPROVAL_POLICY)
    state = tree["tmp"] / "state"
    package = project_tools(tree["project"]) / "project_tool"
    with anyio.fail_after(TEST_BOUND_S):
        async with serve(
            tree["tmp"], project=tree["project"], user_dirs=[tree["user"]], policy=policy, state_dir=state
        ) as s:
            assert "project_tool" not in await s.list_names()  # pending: never offered

            _allow(tree["project"], package, state, policy)  # the user approves this exact content
            assert await s.next_change() == "notifications/tools/list_changed"
            assert "project_tool" in await s.list_names()
            ran = await s.call("project_tool", {"text": "approved"})
            assert ran.is_error is False, text_of(ran)
            assert ran.structured_content == {"text": "approved"}

            (package / "run.py").write_text("print('changed after approval')\n")  # trust:changed
            assert await s.next_change() == "notifications/tools/list_changed"
            assert "project_tool" not in await s.list_names()
            refused = await s.call("project_tool", {"text": "again"})
            assert refused.is_error is True
            assert error_code(refused) == "not-active"
            assert "changed-since-approval" in text_of(refused)


REDEFER_POLICY = """
[defer]
mode = "on"
rules = ["NoDefer(echo_eager)", "Defer(*)"]
min_idle_turns = 1
"""


@pytest.mark.both_rankers
async def test_an_idle_loaded_tool_is_re_deferred_after_a_turn_and_the_client_is_told(tree: dict[str, Path]) -> None:
    policy = tree["tmp"] / "redefer.toml"
    policy.write_text(REDEFER_POLICY)
    with anyio.fail_after(TEST_BOUND_S):
        async with serve(
            tree["tmp"],
            project=tree["project"],
            user_dirs=[tree["user"]],
            policy=policy,
            extra=["--turn-idle", "0.3"],
        ) as s:
            found = await s.call("tool_search", {"tool_names": ["invoice_export"]})
            assert found.is_error is False, text_of(found)
            assert await s.next_change() == "notifications/tools/list_changed"
            assert "invoice_export" in await s.list_names()

            await anyio.sleep(0.6)  # the client is idle longer than --turn-idle: the turn ends
            echoed = await s.call("echo_eager", {"text": "next turn"})
            assert echoed.is_error is False, text_of(echoed)
            assert await s.next_change() == "notifications/tools/list_changed"
            assert "invoice_export" not in await s.list_names()
            refused = await s.call("invoice_export", {"text": "x"})
            assert error_code(refused) == "session:unloaded"


@pytest.mark.both_rankers
async def test_invalid_arguments_are_an_is_error_result_and_nothing_runs(tree: dict[str, Path]) -> None:
    with anyio.fail_after(TEST_BOUND_S):
        async with serve(tree["tmp"], project=tree["project"], user_dirs=[tree["user"]], policy=tree["policy"]) as s:
            result = await s.call("echo_eager", {"text": "x", "--output": "~/.bashrc"})
            assert result.is_error is True
            assert error_code(result) == "invalid-input"


def _rpc(message: dict[str, object]) -> bytes:
    return (json.dumps(message) + "\n").encode()


def _serve_cmd(tree: dict[str, Path], *extra: str) -> list[str]:
    """``tooldir serve`` on the tree's project, user folder, policy and a private state folder."""
    cmd = [sys.executable, "-m", "tooldir", "serve", "--project", str(tree["project"])]
    cmd += ["--user-dir", str(tree["user"]), "--policy", str(tree["policy"])]
    return [*cmd, "--state-dir", str(tree["tmp"] / "state"), *extra]


@pytest.mark.both_rankers
def test_stdout_carries_only_protocol_messages_while_logs_go_to_stderr(tree: dict[str, Path]) -> None:
    noisy = "import json, sys\nprint('noise on stderr', file=sys.stderr)\nprint(json.dumps({'ok': True, 'content': 'fine'}))\n"
    make_tool(tree["user"], "echo_eager", description="Echo text back (always listed).", script=noisy)
    cmd = _serve_cmd(tree, "--log-level", "debug", "--no-watch")
    requests = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "echo_eager", "arguments": {"text": "x"}},
        },
    ]
    with subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tree["tmp"]
    ) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        for message in requests:
            proc.stdin.write(_rpc(message))
        proc.stdin.flush()
        lines = read_until_id(proc, 3)
        rest, stderr = communicate(proc)  # closes stdin: the client hangs up
    lines += rest.splitlines(keepends=True)
    assert proc.returncode == 0
    decoded = [json.loads(line) for line in lines]  # every stdout line is one JSON-RPC message
    assert all(m.get("jsonrpc") == "2.0" for m in decoded)
    by_id = {m["id"]: m for m in decoded if "id" in m}
    assert set(by_id) == {1, 2, 3}
    assert by_id[3]["result"]["content"][0]["text"] == "fine"
    assert "serving" in stderr.decode()  # the logs went to stderr


SLOW_POLICY = """
[defer]
mode = "on"
rules = ["NoDefer(echo_eager)", "NoDefer(slow_tool)", "Defer(*)"]
"""


async def _gone(predicate: Callable[[], bool]) -> None:
    """Wait until the processes ``predicate`` looks for are gone; the server they belonged to has
    ended, so there is no CPU time to go by: the wall backstop bounds it."""
    with anyio.fail_after(server_clock.WALL_BACKSTOP_S):
        while not predicate():
            await anyio.sleep(0.05)


SLOW_TOOL_S = 60


def _slow_tool(tree: dict[str, Path]) -> tuple[str, Path]:
    """Add an eager ``slow_tool`` that sleeps a minute; return its process token and the policy listing it."""
    token = f"slow-{uuid.uuid4().hex}"  # appears in the sandboxed process's argv, so it can be found
    make_tool(
        tree["user"],
        "slow_tool",
        description="Sleep for a minute.",
        script=f"import sys, time\nsys.stdin.read()\ntime.sleep({SLOW_TOOL_S})\n",
        execute={"command": ["python3", "run.py", token], "timeout_s": SLOW_TOOL_S, "network": False, "env": []},
    )
    policy = tree["tmp"] / "slow.toml"
    policy.write_text(SLOW_POLICY)
    return token, policy


async def test_hanging_up_during_a_long_call_ends_the_server_and_the_sandboxed_tool(tree: dict[str, Path]) -> None:
    token, policy = _slow_tool(tree)
    with anyio.fail_after(TEST_BOUND_S):
        async with serve(tree["tmp"], project=tree["project"], user_dirs=[tree["user"]], policy=policy) as s:
            assert "slow_tool" in await s.list_names()
            async with anyio.create_task_group() as tg:
                tg.start_soon(s.client.call_tool, "slow_tool", {"text": "x"})
                await s.until("the slow tool running", lambda: bool(processes_mentioning(token)))
                tg.cancel_scope.cancel()  # the client gives up on the call and hangs up
        await _gone(lambda: not processes_mentioning(token) and not processes_mentioning(s.marker))
    assert "the client closed the connection; shut down cleanly" in s.log_file.read_text()


@pytest.mark.both_rankers
async def test_a_listed_tool_whose_manifest_breaks_is_withdrawn_with_list_changed(tree: dict[str, Path]) -> None:
    with anyio.fail_after(TEST_BOUND_S):
        async with serve(tree["tmp"], project=tree["project"], user_dirs=[tree["user"]], policy=tree["policy"]) as s:
            assert "echo_eager" in await s.list_names()
            # json:duplicate-key: parsers disagree on which name wins, so the tool is rejected
            (tree["user"] / "echo_eager" / "schema.json").write_text('{"name": "echo_eager", "name": "read_file"}')
            assert await s.next_change() == "notifications/tools/list_changed"
            assert "echo_eager" not in await s.list_names()
            refused = await s.call("echo_eager", {"text": "x"})
            assert refused.is_error is True
            assert error_code(refused) == "not-active"
            assert "duplicate-key" in text_of(refused)


def test_tools_list_before_initialize_is_a_protocol_error_not_a_list(tree: dict[str, Path]) -> None:
    cmd = _serve_cmd(tree, "--no-watch")
    with subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tree["tmp"]
    ) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write(_rpc({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        proc.stdin.flush()
        lines = read_until_id(proc, 1)
        communicate(proc)
    response = json.loads(lines[-1])
    assert "result" not in response
    assert response["error"]["code"] == -32602  # the SDK's pre-initialization refusal


@pytest.mark.both_rankers
async def test_a_call_the_client_cancels_is_abandoned_and_the_connection_keeps_working(tree: dict[str, Path]) -> None:
    token, policy = _slow_tool(tree)
    with anyio.fail_after(TEST_BOUND_S):
        async with serve(tree["tmp"], project=tree["project"], user_dirs=[tree["user"]], policy=policy) as s:
            async with anyio.create_task_group() as tg:
                tg.start_soon(s.client.call_tool, "slow_tool", {"text": "x"})
                await s.until("the slow tool running", lambda: bool(processes_mentioning(token)))
                tg.cancel_scope.cancel()  # notifications/cancelled
            cancelled = time.monotonic()
            echoed = await s.call("echo_eager", {"text": "still here"})
            # answered while the slow tool would still have been sleeping (60 s)
            assert time.monotonic() - cancelled < SLOW_TOOL_S
            assert echoed.is_error is False, text_of(echoed)
            assert echoed.structured_content == {"text": "still here"}


def test_sigterm_ends_the_server_cleanly(tree: dict[str, Path]) -> None:
    log_file = tree["tmp"] / "term.log"
    cmd = _serve_cmd(tree, "--log-level", "info", "--log-file", str(log_file))
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
    with subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tree["tmp"]
    ) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write(_rpc({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}))
        proc.stdin.flush()
        read_until_id(proc, 1)  # serving now
        proc.send_signal(signal.SIGTERM)
        wait_exit(proc)  # stdin is still open: only the signal can have ended it
        _, stderr = communicate(proc)
    assert proc.returncode == 0
    assert b"Traceback" not in stderr
    assert "signal SIGTERM; shut down cleanly" in log_file.read_text()
