"""watch:exhaust: the watcher holds inotify watches only on what discovery reads, bounded by the
policy limits, however many folders a project plants; real packages are still watched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from toolkit import make_tool, project_tools
from watchkit import WAIT_S, config_for, settles_to_cold_load, watching

from tooldir._internal.inotify import inotify_watches
from tooldir.policy import Limits, Policy
from tooldir.read.discover import package_digest
from tooldir.snapshot.watch import package_folders, root_packages

pytestmark = pytest.mark.serial  # inotify limits: never beside another such test


def plant_tree(top: Path, fanout: int, per: int) -> int:
    """``fanout`` folders under ``top``, each with ``per`` empty subfolders (every folder small
    enough that discovery walks into it)."""
    for i in range(fanout):
        branch = top / f"d{i:04d}"
        branch.mkdir(parents=True)
        for j in range(per):
            (branch / f"e{j:04d}").mkdir()
    return fanout * (per + 1)


@pytest.fixture
def junk_project(tmp_path: Path) -> tuple[Path, Path]:
    project = tmp_path / "project"
    tools = project_tools(project)
    make_tool(tools, "good_tool", extra_files={"lib/helper.py": "X = 1\n"})
    planted = plant_tree(tools / "junk", 100, 199)  # 20,000 folders nested under one package
    assert planted == 20_000
    return project, tools


def test_twenty_thousand_folders_under_one_package_cost_at_most_one_package_of_watches(
    tmp_path: Path, junk_project: tuple[Path, Path]
) -> None:
    project, tools = junk_project
    limits = Policy().limits
    config = config_for(tmp_path, project=project)
    before = inotify_watches()
    with watching(config) as (watcher, problems):
        held = inotify_watches() - before
        # chains (a handful) + the root + good_tool, good_tool/lib + at most max_package_files in junk
        assert 3 <= held <= 32 + 2 + limits.max_package_files, held
        assert watcher.status().watches <= 32 + 2 + limits.max_package_files
        assert [p.code for p in problems] == ["watch-budget"]
        # a real package is still watched, also in its subfolder
        (tools / "good_tool" / "lib" / "helper.py").write_text("X = 2\n")
        snap = settles_to_cold_load(watcher, config)
        assert snap.records("good_tool")[0].digest == package_digest(snap.records("good_tool")[0].files)


def test_a_package_folder_with_too_many_entries_is_watched_but_not_entered(tmp_path: Path) -> None:
    user = tmp_path / "user"
    make_tool(user, "alpha")
    junk = user / "junk"
    junk.mkdir()
    for i in range(20_000):
        (junk / f"f{i:05d}").mkdir()
    config = config_for(tmp_path, user=[user])
    before = inotify_watches()
    with watching(config) as (watcher, problems):
        held = inotify_watches() - before
        assert held <= 32 + 3, held  # chains, the root, alpha, junk itself
        assert problems == []
        make_tool(user, "beta")
        watcher.wait_for(lambda s: "beta" in s.by_name, WAIT_S)


def test_a_root_over_the_entry_limit_is_watched_alone_and_rewatched_when_it_shrinks(tmp_path: Path) -> None:
    user = tmp_path / "user"
    for i in range(12):
        make_tool(user, f"tool_{i:02d}")
    policy = Policy.model_validate({"limits": {"max_root_entries": 10}})
    config = config_for(tmp_path, user=[user], policy=policy)
    before = inotify_watches()
    with watching(config) as (watcher, _):
        assert inotify_watches() - before <= 32 + 1
        assert "tool_00" not in watcher.store.current.by_name
        for i in range(3):
            for path in sorted((user / f"tool_{i:02d}").rglob("*"), reverse=True):
                path.unlink()
            (user / f"tool_{i:02d}").rmdir()
        watcher.wait_for(lambda s: "tool_05" in s.by_name, WAIT_S)
        (user / "tool_05" / "run.py").write_text("print('changed')\n")  # its folder is watched again
        settles_to_cold_load(watcher, config)


def test_folders_that_appear_inside_a_package_are_watched_and_their_edits_picked_up(tmp_path: Path) -> None:
    user = tmp_path / "user"
    make_tool(user, "alpha")
    config = config_for(tmp_path, user=[user])
    with watching(config) as (watcher, _):
        deep = user / "alpha" / "a" / "b"
        deep.mkdir(parents=True)
        (deep / "data.txt").write_text("one\n")
        settles_to_cold_load(watcher, config)
        (deep / "data.txt").write_text("two\n")
        snap = settles_to_cold_load(watcher, config)
        assert any(f.path == "a/b/data.txt" for f in snap.records("alpha")[0].files)


def test_a_partially_watched_package_is_reread_by_the_periodic_rescan(tmp_path: Path) -> None:
    user = tmp_path / "user"
    make_tool(user, "alpha")
    plant_tree(user / "alpha" / "tree", 3, 3)  # 12 folders + alpha + tree: more than 5 may be watched
    policy = Policy.model_validate({"limits": {"max_package_files": 5}})
    config = config_for(tmp_path, user=[user], policy=policy)
    with watching(config, rescan_interval_s=0.2) as (watcher, problems):
        assert [p.code for p in problems] == ["watch-budget"]
        (user / "alpha" / "tree" / "d0002" / "e0002" / "late.txt").write_text("x\n")  # an unwatched folder
        settles_to_cold_load(watcher, config)


def test_package_folders_follow_discoverys_limits(tmp_path: Path) -> None:
    limits = Limits(max_package_depth=3, max_package_files=4)
    pkg = tmp_path / "pkg"
    (pkg / "a" / "b" / "c" / "d").mkdir(parents=True)
    (pkg / "wide").mkdir()
    for i in range(5):
        (pkg / "wide" / f"w{i}").mkdir()
    os.symlink(tmp_path, pkg / "link")
    folders, complete = package_folders(str(pkg), limits, 100)
    rel = [os.path.relpath(f, pkg) for f, _ in folders]
    # depth 1 (pkg) .. 3 (a/b); never a link; never into a folder with more entries than allowed
    assert rel == [".", "a", "wide", "a/b"] and complete
    capped, complete = package_folders(str(pkg), limits, 2)
    assert len(capped) == 2 and not complete
    (tmp_path / "root").mkdir()
    for name in ("x", ".hidden", "y"):
        (tmp_path / "root" / name).mkdir()
    assert root_packages(str(tmp_path / "root"), Limits(max_root_entries=3)) == [
        str(tmp_path / "root" / "x"),
        str(tmp_path / "root" / "y"),
    ]
    assert root_packages(str(tmp_path / "root"), Limits(max_root_entries=2)) is None


def test_a_reloaded_policy_with_other_limits_rearms_the_watches(tmp_path: Path) -> None:
    user = tmp_path / "user"
    make_tool(user, "alpha")
    plant_tree(user / "alpha" / "tree", 4, 4)  # 20 folders below alpha
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text("")
    config = config_for(tmp_path, user=[user])
    before = inotify_watches()
    with watching(config, policy_file=policy_file) as (watcher, _):
        wide = inotify_watches() - before
        policy_file.write_text("[limits]\nmax_package_depth = 1\n")  # only the tool folder is read now
        watcher.wait_for(lambda s: s.generation >= 2, WAIT_S)
        assert inotify_watches() - before <= wide - 20
