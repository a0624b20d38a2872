"""trust:rollback is armed by every load that can lead to a run: ``tooldir run`` (whole
processes), the MCP server and its watcher, and the Python API's default loader."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from shared_helpers import require_sandbox
from toolkit import make_tool, project_tools
from trustkit import NOW, MinisignKey, minisign_keypair, minisign_sign, write_lock

import tooldir
from tooldir.model import Status
from tooldir.policy import KeysPolicy, Policy
from tooldir.snapshot.loader import Loader, make_config
from tooldir.state import HIGH_WATER, load_high_water

TOOLDIR = Path(sys.executable).parent / "tooldir"
V2_SCRIPT = """\
import json
import sys

request = json.load(sys.stdin)
print(json.dumps({"ok": True, "content": "v2"}))
"""
SIGNED_FILES = ("run.py", "tool.lock", "tool.lock.minisig")


@pytest.fixture
def key(tmp_path: Path) -> MinisignKey:
    return minisign_keypair(tmp_path / "keys")


def release_v1_then_v2(project: Path, key: MinisignKey, saved: Path) -> Path:
    """A signed package at version 1 (saved aside), then re-released as version 2 in place."""
    folder = make_tool(project_tools(project), "echo")
    minisign_sign(key, write_lock(folder, version=1))
    saved.mkdir(parents=True)
    for name in SIGNED_FILES:
        shutil.copyfile(folder / name, saved / name)
    (folder / "run.py").write_text(V2_SCRIPT)
    minisign_sign(key, write_lock(folder, version=2))
    return folder


def restore(saved: Path, folder: Path) -> None:
    """The attacker puts the complete, validly signed version 1 back."""
    for name in SIGNED_FILES:
        shutil.copyfile(saved / name, folder / name)


def trusting(key: MinisignKey) -> Policy:
    return Policy(keys=KeysPolicy(minisign=(key.line,)))


def run_cli(*args: str | Path) -> tuple[int, dict[str, object]]:
    done = subprocess.run([str(TOOLDIR), *map(str, args)], capture_output=True, timeout=120, check=False)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def test_a_version_only_ever_used_through_tooldir_run_makes_the_older_one_a_rollback_in_a_later_run(
    tmp_path: Path, key: MinisignKey
) -> None:
    require_sandbox()
    project, state, saved = tmp_path / "project", tmp_path / "state", tmp_path / "saved"
    folder = release_v1_then_v2(project, key, saved)
    policy = tmp_path / "policy.toml"
    policy.write_text(f'[keys]\nminisign = ["{key.line}"]\n')
    common = ["--project", project, "--user-dir", tmp_path / "user", "--state-dir", state, "--policy", policy]

    code, result = run_cli("run", "echo", "--input", '{"text": "x"}', *common, "--json")
    assert (code, result["ok"], result["content"]) == (0, True, "v2")
    assert list(load_high_water(state).values()) == [2]  # recorded by the run itself, nothing else ran

    restore(saved, folder)
    code, result = run_cli("run", "echo", "--input", '{"text": "x"}', *common, "--json")
    error = result["error"]
    assert isinstance(error, dict)
    assert (code, result["ok"], error["code"]) == (3, False, "not-active")
    assert "rollback" in str(error["message"])


def test_the_python_apis_default_load_records_the_signed_versions_it_verified(tmp_path: Path, key: MinisignKey) -> None:
    project, state, saved = tmp_path / "project", tmp_path / "state", tmp_path / "saved"
    folder = release_v1_then_v2(project, key, saved)
    first = tooldir.load(project=project, user_dirs=[], policy=trusting(key), state_dir=state, now=NOW)
    assert first.get("echo") is not None and first.records("echo")[0].status is Status.ACTIVE
    assert list(load_high_water(state).values()) == [2]
    restore(saved, folder)
    (record,) = tooldir.load(project=project, user_dirs=[], policy=trusting(key), state_dir=state, now=NOW).records(
        "echo"
    )
    assert record.status is Status.REJECTED
    assert [d.code for d in record.diagnostics] == ["rollback"]


def test_a_read_only_load_records_nothing_and_says_so_in_its_name(tmp_path: Path, key: MinisignKey) -> None:
    project, state = tmp_path / "project", tmp_path / "state"
    release_v1_then_v2(project, key, tmp_path / "saved")
    config = make_config(project=project, user_dirs=[], policy=trusting(key), state_dir=state, read_only=True)
    assert config.read_only is True
    snap = Loader(config).load(now=NOW)
    assert snap.records("echo")[0].status is Status.ACTIVE
    assert not (state / HIGH_WATER).exists()


def test_within_one_loader_a_rebuild_that_brings_the_older_version_back_is_a_rollback_even_if_state_is_unwritable(
    tmp_path: Path, key: MinisignKey
) -> None:
    project, saved = tmp_path / "project", tmp_path / "saved"
    folder = release_v1_then_v2(project, key, saved)
    state = tmp_path / "state"
    (state / ".lock").mkdir(parents=True)  # readable, but no update can take the state lock (also as root)
    loader = Loader(make_config(project=project, user_dirs=[], policy=trusting(key), state_dir=state))
    first = loader.load(now=NOW)
    assert first.records("echo")[0].status is Status.ACTIVE
    assert "state-unwritable" in [d.code for d in first.diagnostics]
    restore(saved, folder)
    (record,) = loader.rebuild({str(folder.parent): ["echo"]}, generation=2, now=NOW).records("echo")
    assert (record.status, [d.code for d in record.diagnostics]) == (Status.REJECTED, ["rollback"])


def test_in_one_mcp_server_the_watcher_reload_of_the_older_version_is_a_rollback(
    tmp_path: Path, key: MinisignKey
) -> None:
    from tooldir.mcp.server import ToolServer

    project, state, saved = tmp_path / "project", tmp_path / "state", tmp_path / "saved"
    folder = release_v1_then_v2(project, key, saved)
    config = make_config(project=project, user_dirs=[], policy=trusting(key), state_dir=state)
    front = ToolServer.open(config, watch=True)
    try:
        assert "echo" in [t["name"] for t in front.list_tools_sync()]
        assert front.watcher is not None
        restore(saved, folder)

        def rolled_back(snap: tooldir.Snapshot) -> bool:
            return any(d.code == "rollback" for r in snap.records("echo") for d in r.diagnostics)

        snap = front.watcher.wait_for(rolled_back, timeout=15)
        assert snap.records("echo")[0].status is Status.REJECTED
        assert "echo" not in [t["name"] for t in front.list_tools_sync()]
        result = front.call_tool_sync("echo", {"text": "x"})
        assert result.is_error is True
        assert result.structured_content is not None
        assert result.structured_content["error"]["code"] == "not-active"
    finally:
        front.close()
