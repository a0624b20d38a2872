"""The sandbox drills hold for an unprivileged user too, not only for root (issue 8).

Run as root (as CI does), this creates a throwaway user and runs ``tooldir drill --only 'sandbox:*'``
as that user in a separate process; run as a normal user, the in-process drills already cover it.
"""

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

from tooldir.drill import load_scenarios

SCENARIOS = unprivileged.REPO / "tooldir" / "_data" / "scenarios"


def test_every_sandbox_drill_passes_when_run_by_an_unprivileged_user() -> None:
    require_sandbox()
    if os.geteuid() != 0:
        pytest.skip("already unprivileged: tests/attacks/test_drills.py ran the sandbox drills as this user")
    expected = sorted(s.drill_id for s in load_scenarios(SCENARIOS) if s.threat.startswith("sandbox:"))
    assert expected, "no sandbox drills found"
    workdir = Path(tempfile.mkdtemp(prefix="tooldir-drill-user-", dir="/tmp"))
    try:
        with unprivileged.throwaway_user() as user:
            uid = pwd.getpwnam(user).pw_uid
            os.chmod(workdir, 0o700)
            os.chown(workdir, uid, uid)
            argv = [sys.executable, "-m", "tooldir", "drill", str(SCENARIOS), "--only", "sandbox:*", "--json"]
            done = unprivileged.run_as_user(user, argv, workdir, expose=unprivileged.python_trees(), timeout=300)
        assert done.stdout, done.stderr.decode()[-3000:]
        report = json.loads(done.stdout)
        failed = {d["id"]: d["details"] for d in report["drills"] if not d["passed"]}
        assert failed == {}
        assert sorted(d["id"] for d in report["drills"]) == expected
        assert report["passed"] is True and done.returncode == 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
