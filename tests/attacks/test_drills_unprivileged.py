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

from tooldir.drill import load_scenarios, select

SCENARIOS = unprivileged.REPO / "tooldir" / "_data" / "scenarios"
SCENARIO_LIST = load_scenarios(SCENARIOS)
ROOT_ONLY = sorted(s.drill_id for s in SCENARIO_LIST if "root" in s.requires)
# need memory_mb to bound a process tree as a whole: not runnable for a user with only rlimits
BOUND_ONLY = sorted(s.drill_id for s in SCENARIO_LIST if "memory-bound" in s.requires)


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


# The drills run in parts (one ``tooldir drill --only ...`` each) so that parallel test workers
# share them; together the parts are every bundled drill, each exactly once (checked below). The
# parts are balanced by cost: a few drills take seconds (seconds as root, measured 2026-12-02;
# as this user fs:size/many-entries took about three times as long), the rest a fraction of one.
# Each costly drill goes, longest first, to the part with the least cost so far.
PARTS = 6
COST_S = {
    "fs:size/many-entries": 14.0,
    "watch:exhaust/wide": 15.0,
    "mcp:pre-trust": 7.0,
    "sandbox:hang": 6.0,
    "serve:starve/cancel-cap": 5.7,
    "exec:entrypoint": 4.0,
    "watch:storm": 2.4,
    "watch:exhaust/nested": 1.2,
    "sarif:bomb": 1.2,
}
OTHER_COST_S = 0.3


def _balanced(scenarios: list[Any], parts: int) -> list[list[Any]]:
    split: list[list[Any]] = [[] for _ in range(parts)]
    cost = [0.0] * parts
    for scenario in sorted(scenarios, key=lambda s: -COST_S.get(s.drill_id, OTHER_COST_S)):
        lightest = cost.index(min(cost))
        split[lightest].append(scenario)
        cost[lightest] += COST_S.get(scenario.drill_id, OTHER_COST_S)
    return split


SPLIT = _balanced(SCENARIO_LIST, PARTS)


def test_the_parts_hold_every_bundled_drill_exactly_once() -> None:
    ids = [s.drill_id for part in SPLIT for s in part]
    assert sorted(ids) == sorted(s.drill_id for s in SCENARIO_LIST) and len(ids) == len(set(ids))
    assert all(SPLIT)
    assert any(s.drill_id.startswith("sandbox:") for part in SPLIT for s in part)
    assert set(COST_S) <= {s.drill_id for s in SCENARIO_LIST}, "a costed drill is gone: update COST_S"
    assert select(SCENARIO_LIST, []) == sorted(SCENARIO_LIST, key=lambda s: s.name)  # what a run without --only runs
    for part in SPLIT:
        assert select(SCENARIO_LIST, [s.name for s in part]) == sorted(part, key=lambda s: s.name)


@pytest.mark.parametrize("part", range(PARTS), ids=[f"part{n + 1}of{PARTS}" for n in range(PARTS)])
def test_an_unprivileged_user_gets_exit_0_with_root_only_drills_reported_as_not_runnable(
    as_user: Any, part: int
) -> None:
    require_sandbox()
    assert ROOT_ONLY == [
        "fs:perms/file",
        "fs:perms/owner",
        "fs:special/device",
        "host:defaults/managed-floor",
        "policy:partial/managed-floor",
        "trust:foreign-files/approvals-owner",
        "trust:foreign-files/policy-owner",
    ]
    assert BOUND_ONLY == ["mcp:server-memory"]
    chosen = SPLIT[part]
    # by folder name: a folder name is never another drill's threat id or drill id (those hold ':')
    done, report = as_user("--only", *(s.name for s in chosen))
    statuses = {d["id"]: d["status"] for d in report["drills"]}
    assert sorted(statuses) == sorted(s.drill_id for s in chosen)
    failed = {d["id"]: d["details"] for d in report["drills"] if d["status"] == "failed"}
    assert failed == {}
    root_only_here = sorted(s.drill_id for s in chosen if s.drill_id in ROOT_ONLY)
    unbounded = sorted(  # the user has no cgroup or scope of its own here: those drills say so
        d["id"] for d in report["drills"] if d["status"] == "not-runnable" and d["id"] in BOUND_ONLY
    )
    assert sorted(i for i, status in statuses.items() if status == "not-runnable") == sorted(root_only_here + unbounded)
    for d in report["drills"]:
        if d["status"] == "not-runnable":
            needs = "needs a memory bound on a whole process tree" if d["id"] in unbounded else "needs root"
            assert d["reason"].startswith(f"not runnable here ({needs}")
            assert d["passed"] is False
    sandbox = [i for i in statuses if i.startswith("sandbox:")]  # none need root: every one runs
    assert all(statuses[i] == "passed" for i in sandbox)
    assert report["counts"] == {
        "passed": len(statuses) - len(root_only_here) - len(unbounded),
        "failed": 0,
        "not-runnable": len(root_only_here) + len(unbounded),
    }
    assert report["passed"] is True and done.returncode == 0


def test_an_unprivileged_user_lists_the_same_bundled_drills_the_parts_are_made_of(as_user: Any) -> None:
    done, report = as_user("--list")
    assert done.returncode == 0
    assert [d["id"] for d in report["drills"]] == [s.drill_id for s in SCENARIO_LIST]


def test_require_all_makes_an_unprivileged_run_with_root_only_drills_exit_1(as_user: Any) -> None:
    done, report = as_user("--only", *ROOT_ONLY, "fs:prefix", "--require-all")
    assert {d["id"]: d["status"] for d in report["drills"]} == {
        "fs:perms/file": "not-runnable",
        "fs:perms/owner": "not-runnable",
        "fs:prefix": "passed",
        "fs:special/device": "not-runnable",
        "host:defaults/managed-floor": "not-runnable",
        "policy:partial/managed-floor": "not-runnable",
        "trust:foreign-files/approvals-owner": "not-runnable",
        "trust:foreign-files/policy-owner": "not-runnable",
    }
    assert report["require_all"] is True and report["passed"] is False
    assert done.returncode == 1
