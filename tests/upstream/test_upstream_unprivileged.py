"""MCP server packages hold for an unprivileged user too (issue 16 "as root and unprivileged"):
as root, the mcp drills run as a throwaway user in a separate process, with sandboxed servers
started, listed, pinned and called by that user."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import unprivileged
from shared_helpers import require_sandbox

MCP_DRILLS = ["mcp:pre-trust", "mcp:rug-pull", "mcp:instructions", "mcp:instructions/hidden"]


def test_the_mcp_drills_pass_for_an_unprivileged_user() -> None:
    if os.geteuid() != 0:
        pytest.skip("already unprivileged: tests/attacks/test_drills.py ran the mcp drills as this user")
    require_sandbox()
    workdir = Path(tempfile.mkdtemp(prefix="tooldir-mcp-user-", dir="/tmp"))
    try:
        with unprivileged.throwaway_user() as user:
            uid = pwd.getpwnam(user).pw_uid
            os.chmod(workdir, 0o700)
            os.chown(workdir, uid, uid)
            argv = [sys.executable, "-m", "tooldir", "drill", "--only", *MCP_DRILLS, "--json"]
            done = unprivileged.run_as_user(user, argv, workdir, expose=unprivileged.python_trees(), timeout=600)
            assert done.stdout, done.stderr.decode()[-3000:]
            report = json.loads(done.stdout)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    assert {d["id"]: d["status"] for d in report["drills"]} == dict.fromkeys(MCP_DRILLS, "passed")
    assert done.returncode == 0
