"""server.json packages (issue 16 item 1, DESIGN §10): discovered, validated as strictly as
schema.json, hashed and trusted exactly like tool packages; discovery and scan never start them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from servertools import make_server, server_manifest
from toolkit import approve, make_tool, project_tools

from tooldir import load
from tooldir.model import Status
from tooldir.read import genschema
from tooldir.read.validate import server_schema


def codes(snapshot, name):  # type: ignore[no-untyped-def]
    return {d.code for d in snapshot.diagnostics if d.tool == name}


def test_the_committed_server_schema_is_exactly_what_the_model_generates() -> None:
    assert genschema.SERVER_SCHEMA_FILE.read_text("utf-8") == genschema.render_server()
    assert server_schema() == genschema.generate_server()
    assert server_schema()["additionalProperties"] is False


def test_a_user_server_package_is_active_but_never_offered_as_a_tool_itself(tmp_path: Path, root: Path) -> None:
    make_server(root, "notes")
    snap = load(project=None, user_dirs=[root], state_dir=tmp_path / "state")
    (record,) = snap.records("notes")
    assert record.status is Status.ACTIVE
    assert record.server is not None and record.server.server.command == ("python3", "server.py")
    assert record.digest is not None and record.digest.startswith("sha256:")
    assert "notes" not in snap.by_name


def test_a_project_server_package_is_pending_until_approved_like_a_tool_package(tmp_path: Path) -> None:
    tools = project_tools(tmp_path / "proj")
    folder = make_server(tools, "notes")
    state = tmp_path / "state"
    snap = load(project=tmp_path / "proj", user_dirs=[], state_dir=state)
    assert snap.records("notes")[0].status is Status.PENDING
    assert "not-approved" in codes(snap, "notes")
    approve(state, folder)
    snap = load(project=tmp_path / "proj", user_dirs=[], state_dir=state)
    assert snap.records("notes")[0].status is Status.ACTIVE
    (folder / "server.py").write_text("print('changed')\n")
    snap = load(project=tmp_path / "proj", user_dirs=[], state_dir=state)
    assert snap.records("notes")[0].status is Status.PENDING
    assert "changed-since-approval" in codes(snap, "notes")


@pytest.mark.parametrize(
    ("change", "code", "pointer"),
    [
        ({"extra": 1}, "schema-invalid", "/extra"),
        ({"server": {"command": ["python3", "server.py"], "shell": True}}, "schema-invalid", "/server/shell"),
        ({"server": {"command": ["sh", "-c", "python3 server.py"]}}, "unsafe-command", "/server/command"),
        ({"server": {"command": ["/usr/bin/python3", "server.py"]}}, "unsafe-command", "/server/command/0"),
        ({"server": {"command": ["python3", "../x/server.py"]}}, "unsafe-command", "/server/command/1"),
        ({"server": {"command": ["python3", "$HOME/server.py"]}}, "unsafe-command", "/server/command/1"),
        ({"server": {"command": ["python3", "server.py"], "timeout_s": "3"}}, "schema-invalid", "/server/timeout_s"),
        ({"name": "other"}, "name-mismatch", "/name"),
        ({"risk": "root"}, "schema-invalid", "/risk"),
    ],
)
def test_a_bad_server_manifest_is_rejected_with_the_code_and_pointer_of_its_fault(
    tmp_path: Path, root: Path, change: dict[str, object], code: str, pointer: str
) -> None:
    make_server(root, "notes", **change)
    make_tool(root, "good")
    snap = load(project=None, user_dirs=[root], state_dir=tmp_path / "state")
    assert snap.records("notes")[0].status is Status.REJECTED
    found = {(d.code, d.pointer) for d in snap.diagnostics if d.tool == "notes"}
    assert any(c == code and (p or "").startswith(pointer) for c, p in found), found
    assert snap.by_name["good"].status is Status.ACTIVE


def test_a_package_with_both_schema_json_and_server_json_is_rejected(tmp_path: Path, root: Path) -> None:
    folder = make_tool(root, "notes")
    (folder / "server.json").write_text(json.dumps(server_manifest("notes")))
    snap = load(project=None, user_dirs=[root], state_dir=tmp_path / "state")
    assert snap.records("notes")[0].status is Status.REJECTED
    assert "schema-invalid" in codes(snap, "notes")


def test_a_control_character_in_a_server_description_is_an_error(tmp_path: Path, root: Path) -> None:
    make_server(root, "notes", description="Notes \u001b[2J of the repo.")
    snap = load(project=None, user_dirs=[root], state_dir=tmp_path / "state")
    assert "control-character" in codes(snap, "notes")


def test_scan_and_load_never_start_a_server_package(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    tools = project_tools(tmp_path / "proj")
    make_server(tools, "notes", canary=canary)
    user = tmp_path / "user"
    user.mkdir()
    make_server(user, "mine", canary=canary)
    load(project=tmp_path / "proj", user_dirs=[user], state_dir=tmp_path / "state")
    done = subprocess.run(
        [sys.executable, "-m", "tooldir", "scan", "--json", "--project", "proj", "--user-dir", "user",
         "--state-dir", str(tmp_path / "state")],
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    names = {t["name"] for t in json.loads(done.stdout)["tools"]}
    assert {"notes", "mine"} <= names
    assert not canary.exists()  # never started on the host
    # nor in the sandbox: nothing was prepared (the verified copy) or listed (user state)
    assert not (tmp_path / "state" / "sandbox").exists()
    assert not (tmp_path / "state" / "upstream.json").exists()
