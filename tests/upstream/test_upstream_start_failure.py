"""An MCP server package that cannot start (issue 28 item 4): allow, show and run name the last
lines of its stderr and the likely cause (a missing runtime root), and a host calling the library
gets the same message."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from harness import RUNTIME, server_policy
from servertools import copy_server, make_server
from shared_helpers import require_sandbox
from toolkit import project_tools

from tooldir.errors import ExecutionError
from tooldir.manage import approve
from tooldir.snapshot.loader import Loader, make_config
from tooldir.upstream import approve_listing, likely_cause, load_upstream_state, start_failure, stderr_tail

# -- the report, pure ------------------------------------------------------------------------------

TRACEBACK = """Traceback (most recent call last):
  File "/tool/server.py", line 12, in <module>
    from mcp.server.mcpserver import MCPServer
    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
ModuleNotFoundError: No module named 'mcp'
"""


def test_the_stderr_tail_is_its_last_lines_without_caret_markers() -> None:
    cut = TRACEBACK.index("    from")  # stderr arrives in chunks, kept one per read
    tail = stderr_tail([TRACEBACK[:cut].strip(), TRACEBACK[cut:].strip()], lines=3)
    assert tail == [
        'File "/tool/server.py", line 12, in <module>',
        "from mcp.server.mcpserver import MCPServer",
        "ModuleNotFoundError: No module named 'mcp'",
    ]


def test_a_missing_module_points_at_the_runtime_roots_of_the_policy() -> None:
    cause = likely_cause(stderr_tail([TRACEBACK]), ["/opt/venv/site-packages"])
    assert cause is not None and "sandbox.runtime_roots (now: /opt/venv/site-packages)" in cause
    assert likely_cause(["Error: Cannot find module 'express'"], []) is not None


def test_other_stderr_speaks_for_itself_and_silence_gets_a_hint() -> None:
    assert likely_cause(["cannot open the notes database"], []) is None
    silent = likely_cause([], [])
    assert silent is not None and "wrote nothing on stderr" in silent and "(now: none)" in silent


def test_the_report_is_one_line_with_the_reason_the_tail_and_the_cause() -> None:
    text = start_failure("Connection closed", [TRACEBACK], [])
    assert "\n" not in text
    assert text.startswith("Connection closed; last lines of its stderr: Traceback (most recent call last): | File")
    assert text.endswith("sandbox.runtime_roots (now: none)")


# -- from the CLI and the library, with a real sandbox ---------------------------------------------

DATABASE_SERVER = """import sys
sys.stderr.write("notes: cannot open the notes database /data/notes.db\\n")
sys.exit(3)
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    require_sandbox()
    tools = project_tools(tmp_path / "proj")
    copy_server("good", tools, "notes")  # FastMCP: needs the mcp SDK as a runtime root
    make_server(tools, "database", script=DATABASE_SERVER)
    (tmp_path / "none").mkdir()
    (tmp_path / "policy.toml").write_text("")  # no runtime roots
    return tmp_path


def tooldir(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    common = ["--project", "proj", "--user-dir", "none", "--policy", "policy.toml", "--state-dir", str(cwd / "state")]
    return subprocess.run(
        [sys.executable, "-m", "tooldir", *args, *common],
        cwd=cwd, capture_output=True, text=True, check=False, timeout=180,
    )  # fmt: skip


def _names_the_missing_sdk(text: str, *, started: str = "could not be started") -> bool:
    return (
        started in text
        and "ModuleNotFoundError: No module named 'mcp'" in text
        and "likely cause: a module it imports is not in the sandbox" in text
        and "sandbox.runtime_roots (now: none)" in text
    )


def test_allow_show_and_run_name_the_stderr_and_the_missing_runtime_root(project: Path) -> None:
    allowed = tooldir(project, "allow", "notes", "--yes")
    assert allowed.returncode == 1
    assert _names_the_missing_sdk(allowed.stderr), allowed.stderr
    assert (
        "Connection closed;" in allowed.stderr
        and "its tools are pinned at its first successful start" in allowed.stderr
    )

    shown = tooldir(project, "show", "notes")  # never starts it: what the last start recorded
    assert shown.returncode == 0 and "last start failed (" in shown.stdout
    assert _names_the_missing_sdk(" ".join(shown.stdout.split())), shown.stdout
    (record,) = json.loads(tooldir(project, "show", "notes", "--json").stdout)["records"]
    assert _names_the_missing_sdk(record["start_failure"]["message"]) and record["start_failure"]["at"]

    ran = tooldir(project, "run", "notes__add", "--input", '{"a": 1, "b": 2}')
    assert ran.returncode == 1
    assert "notes__add: unknown until its MCP server lists it" in ran.stderr
    assert _names_the_missing_sdk(ran.stderr), ran.stderr


def test_a_server_that_was_listed_and_then_cannot_start_says_why_on_run(project: Path) -> None:
    (project / "policy.toml").write_text(f"[sandbox]\nruntime_roots = {json.dumps(list(RUNTIME))}\n")
    assert tooldir(project, "allow", "notes", "--yes").returncode == 0
    (record,) = json.loads(tooldir(project, "show", "notes", "--json").stdout)["records"]
    assert record["start_failure"] is None
    (project / "policy.toml").write_text("")  # the runtime root is gone: the listing stays in state
    ran = tooldir(project, "run", "notes__add", "--input", '{"a": 1, "b": 2}', "--json")
    assert ran.returncode == 1
    error = json.loads(ran.stdout)["error"]
    # the run's listing failed first; the call then finds it down (back-off) and says why
    assert error["code"] == "upstream-unavailable", error
    assert _names_the_missing_sdk(error["message"], started="'notes' is down (Connection closed;"), error


def test_other_stderr_is_shown_without_a_guessed_cause(project: Path) -> None:
    allowed = tooldir(project, "allow", "database", "--yes")
    assert allowed.returncode == 1
    assert "last lines of its stderr: notes: cannot open the notes database /data/notes.db" in allowed.stderr
    assert "likely cause" not in allowed.stderr


def test_a_host_gets_the_same_report_and_the_record_show_reads(project: Path) -> None:
    config = make_config(
        project=project / "proj", user_dirs=[], state_dir=project / "state", policy=server_policy(runtime_roots=())
    )
    record = next(t for t in Loader(config).load().tools if t.name == "notes")
    approve(config, "notes", digest=record.digest)
    record = next(t for t in Loader(config).load().tools if t.name == "notes")
    with pytest.raises(ExecutionError) as caught:
        approve_listing(record, config.policy, config.state_dir)
    assert caught.value.code == "upstream-unavailable" and _names_the_missing_sdk(caught.value.message)
    entry = load_upstream_state(config.state_dir)["packages"][record.path]
    assert entry["failure"]["message"] == caught.value.message and entry["failure"]["digest"] == record.digest
