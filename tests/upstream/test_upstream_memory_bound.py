"""An MCP server package is held to ``memory_mb`` as a tool is (issue 23 item 6): one bound for the
server and every process it forks, for its whole life, reported the same way when it kills.

The server is the drill's (tooldir/_data/scenarios/mcp-server-memory): its tool ``hold`` forks
processes that each fill N MiB and exits when one of them is killed before it holds its memory.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from harness import rig, server_policy
from shared_helpers import require_sandbox

from tooldir import upstream
from tooldir.policy import Policy
from tooldir.sandbox import bubblewrap

SCENARIO = Path(__file__).parents[2] / "tooldir" / "_data" / "scenarios" / "mcp-server-memory"
PACKAGE = SCENARIO / "tree" / "home" / ".config" / "tooldir" / "tools" / "hog"


@pytest.fixture(autouse=True)
def _sandbox() -> None:
    require_sandbox()


def plant_hog(root: Path, canary: Path) -> None:
    (root / "hog").mkdir(parents=True)
    (root / "hog" / "server.json").write_text((PACKAGE / "server.json").read_text())
    (root / "hog" / "server.py").write_text((PACKAGE / "server.py").read_text().replace("{canary}", str(canary)))


def host_bound() -> str:
    return bubblewrap.choose_bound(Policy().sandbox).kind


@pytest.mark.serial
def test_a_server_whose_processes_together_go_over_memory_mb_is_killed_by_one_bound_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, canary = tmp_path / "user", tmp_path / "canary"
    plant_hog(root, canary)
    bound = host_bound()
    if bound == "rlimit+seccomp":  # no cgroup here: a policy asking for one refuses to start the server
        with rig(root, tmp_path / "state", server_policy(memory_mb=128, memory_bound="cgroup")) as r:
            result = r.registry.call("hog__hold", {"children": 1, "mb": 1})
            assert result.error is not None and result.error.code in ("upstream-unavailable", "unknown-tool")
        return
    with rig(root, tmp_path / "state", server_policy(memory_mb=128)) as r:
        within = r.registry.call("hog__hold", {"children": 2, "mb": 20})
        assert within.ok and json.dumps(within.content).count("held 2 x 20 MiB") == 1, within.error
        over = r.registry.call("hog__hold", {"children": 6, "mb": 60})  # 360 MiB in 6 processes
        assert over.error is not None and over.error.code == "upstream-unavailable"
        if bound != "systemd-scope":  # the scope kills too, but only a cgroup of ours tells why
            assert "after going over its memory limit (sandbox.memory_mb = 128" in over.error.message
            assert bound in over.error.message
        real = upstream._backoff_clock  # past the first back-off (1 s) instead of sleeping through it
        monkeypatch.setattr(upstream, "_backoff_clock", lambda: real() + upstream._BACKOFF_FIRST_S + 0.2)
        again = r.registry.call("hog__hold", {"children": 1, "mb": 10})  # restarted, still usable
        assert again.ok, again.error
    assert not canary.exists()


@pytest.mark.serial
def test_every_process_of_a_server_lives_in_its_one_cgroup_until_the_server_is_closed(tmp_path: Path) -> None:
    root = tmp_path / "user"
    plant_hog(root, tmp_path / "canary")
    bound = host_bound()
    with rig(root, tmp_path / "state", server_policy(memory_mb=256)) as r:
        assert r.registry.call("hog__hold", {"children": 1, "mb": 1}).ok
        (session,) = r.hub._sessions.values()
        prepared = session._prepared
        assert prepared is not None and prepared.memory_bound == bound
        if bound not in ("cgroup", "cgroup-v1"):
            assert prepared.group is None
            return
        group = prepared.group
        assert group is not None and session._pid in group.pids()  # bubblewrap's launcher
        assert len(group.pids()) >= 3  # + the sandbox's init + the server itself
        limit = "memory.max" if bound == "cgroup" else "memory.limit_in_bytes"
        assert int((group.path / limit).read_text()) == 256 * 1024 * 1024
    assert not group.path.exists()  # closing the server emptied and removed its cgroup


@pytest.mark.serial
def test_tooldir_run_of_a_server_tool_over_the_bound_exits_1_naming_the_limit_and_reports_the_bound(
    tmp_path: Path,
) -> None:
    root = tmp_path / "user"
    plant_hog(root, tmp_path / "canary")
    policy = tmp_path / "policy.toml"
    policy.write_text("[sandbox]\nmemory_mb = 128\n")
    policy.chmod(0o600)
    project = tmp_path / "project"
    project.mkdir()
    argv = [sys.executable, "-m", "tooldir", "run", "hog__hold", "--json", "--user-dir", str(root)]
    argv += ["--state-dir", str(tmp_path / "state"), "--policy", str(policy), "--input"]
    done = subprocess.run([*argv, '{"children": 6, "mb": 60}'], cwd=project, capture_output=True, timeout=120)
    assert b"Traceback" not in done.stderr
    report = json.loads(done.stdout)
    bound = host_bound()
    assert report["sandbox"] == {"backend": "bubblewrap", "memory_bound": bound}
    if bound in ("cgroup", "cgroup-v1"):
        assert done.returncode == 1 and report["error"]["code"] == "upstream-unavailable"
        assert "after going over its memory limit (sandbox.memory_mb = 128" in report["error"]["message"]
    assert not (tmp_path / "canary").exists()
