"""The drills hold for an unprivileged user too, not only for root (issues 8 and 12).

Run as root (as CI does), this creates a throwaway user and runs ``tooldir drill`` as that user in
a separate process; run as a normal user, the in-process drills already cover it. A drill that needs
root is reported as not runnable here, apart from failures, and the run still exits 0.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import unprivileged
from shared_helpers import require_sandbox

from tooldir.drill import load_scenarios

SCENARIOS = unprivileged.REPO / "tooldir" / "_data" / "scenarios"
ROOT_ONLY = sorted(s.drill_id for s in load_scenarios(SCENARIOS) if "root" in s.requires)


@pytest.fixture(scope="module")
def as_user() -> Iterator[Any]:
    """Run ``tooldir drill ...`` as one throwaway unprivileged user, from a folder of its own."""
    if os.geteuid() != 0:
        pytest.skip("already unprivileged: tests/attacks/test_drills.py ran the drills as this user")
    workdir = Path(tempfile.mkdtemp(prefix="tooldir-drill-user-", dir="/tmp"))
    try:
        with unprivileged.throwaway_user() as user:
            uid = pwd.getpwnam(user).pw_uid
            os.chmod(workdir, 0o700)
            os.chown(workdir, uid, uid)

            def drill(*args: str) -> tuple[subprocess.CompletedProcess[bytes], dict[str, Any]]:
                here = Path(tempfile.mkdtemp(dir=workdir))  # run_as_user lays its views out in the folder
                os.chown(here, uid, uid)
                argv = [sys.executable, "-m", "tooldir", "drill", *args, "--json"]
                done = unprivileged.run_as_user(user, argv, here, expose=unprivileged.python_trees(), timeout=600)
                assert done.stdout, done.stderr.decode()[-3000:]
                return done, json.loads(done.stdout)

            yield drill
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def test_an_unprivileged_user_gets_exit_0_with_root_only_drills_reported_as_not_runnable(as_user: Any) -> None:
    require_sandbox()
    assert ROOT_ONLY == ["fs:perms/file", "fs:perms/owner", "fs:special/device"]
    done, report = as_user()  # every bundled drill
    statuses = {d["id"]: d["status"] for d in report["drills"]}
    assert sorted(statuses) == sorted(s.drill_id for s in load_scenarios(SCENARIOS))
    failed = {d["id"]: d["details"] for d in report["drills"] if d["status"] == "failed"}
    assert failed == {}
    assert sorted(i for i, status in statuses.items() if status == "not-runnable") == ROOT_ONLY
    for d in report["drills"]:
        if d["status"] == "not-runnable":
            assert d["reason"].startswith("not runnable here (needs root")
            assert d["passed"] is False
    sandbox = [i for i in statuses if i.startswith("sandbox:")]
    assert sandbox and all(statuses[i] == "passed" for i in sandbox)
    assert report["counts"] == {"passed": len(statuses) - 3, "failed": 0, "not-runnable": 3}
    assert report["passed"] is True and done.returncode == 0


def test_require_all_makes_an_unprivileged_run_with_root_only_drills_exit_1(as_user: Any) -> None:
    done, report = as_user("--only", *ROOT_ONLY, "fs:prefix", "--require-all")
    assert {d["id"]: d["status"] for d in report["drills"]} == {
        "fs:perms/file": "not-runnable",
        "fs:perms/owner": "not-runnable",
        "fs:prefix": "passed",
        "fs:special/device": "not-runnable",
    }
    assert report["require_all"] is True and report["passed"] is False
    assert done.returncode == 1
