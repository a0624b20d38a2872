"""Loader.rebuild: incremental builds equal a cold load (no watchdog here: changes are scripted)."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from toolkit import approve, make_tool, project_tools
from watchkit import check_consistent, config_for, reference_snapshot

import tooldir.snapshot.loader
from tooldir.errors import StateError
from tooldir.model import Status
from tooldir.policy import Limits, Policy
from tooldir.snapshot.loader import Loader
from tooldir.state import APPROVALS

# look-alike and colliding names exercise resolution groups: alpha/Alpha collide, a1pha looks like alpha
NAMES = ["alpha", "Alpha", "a1pha", "beta", "gamma", "read_fiIe", "delta"]


def mutate(rng: random.Random, roots: list[Path], outside: Path, state: Path) -> tuple[Path | None, str | None]:
    """One random change; returns (root, folder name) that changed, or (None, None) for trust state."""
    root = rng.choice(roots)
    name = rng.choice(NAMES)
    folder = root / name
    op = rng.randrange(10)
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        folder.unlink()
        return root, name
    if op <= 2:
        make_tool(root, name, description=f"tool {name} v{rng.randrange(1000)}")
    elif op == 3 and folder.is_dir():
        shutil.rmtree(folder)
    elif op == 4 and folder.is_dir():
        (folder / "run.py").write_text(f"print({rng.randrange(1000)})\n")
    elif op == 5 and folder.is_dir():
        target = root / rng.choice(NAMES)
        if not target.exists():
            folder.rename(target)
            return root, f"{name}\0{target.name}"
    elif op == 6:
        make_tool(root, name, raw_manifest=b'{"name": "' + name.encode() + b'", "name": "x"}')
    elif op == 7:
        (outside / name).mkdir(exist_ok=True)
        if folder.is_dir():
            shutil.rmtree(folder)
        folder.symlink_to(outside / name)
    elif op == 8 and not folder.exists():
        folder.write_text("stray")
    elif op == 9 and folder.is_dir() and (folder / "schema.json").exists():
        approve(state, folder, json.loads((folder / "schema.json").read_bytes()).get("name", name))
        return None, None
    return root, name


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_every_incremental_rebuild_equals_a_cold_load_through_random_changes(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    project = tmp_path / "proj"
    user = tmp_path / "user"
    outside = tmp_path / "outside"
    for d in (project, user, outside):
        d.mkdir()
    proot = project_tools(project)
    config = config_for(tmp_path, project=project, user=[user])
    loader = Loader(config)
    loader.load()
    for step in range(120):
        root, name = mutate(rng, [proot, user], outside, config.state_dir)
        if root is None or name is None:
            snap = loader.rebuild({}, generation=step + 2)
        else:
            snap = loader.rebuild({str(root): set(name.split("\0"))}, generation=step + 2)
        want = reference_snapshot(config)
        assert snap.id == want.id, f"step {step}"
        assert snap.tools == want.tools
        assert snap.diagnostics == want.diagnostics
        check_consistent(snap)


def test_a_rebuild_rescans_only_the_named_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = tmp_path / "user"
    for i in range(20):
        make_tool(user, f"tool_{i:02d}")
    loader = Loader(config_for(tmp_path, user=[user]))
    loader.load()
    scanned: list[str] = []
    real = tooldir.snapshot.loader.scan_package

    def counting(fd: int, root: object, name: str, limits: Limits) -> object:
        scanned.append(name)
        return real(fd, root, name, limits)  # type: ignore[arg-type]

    monkeypatch.setattr(tooldir.snapshot.loader, "scan_package", counting)
    (user / "tool_07" / "run.py").write_text("print('changed')\n")
    snap = loader.rebuild({str(user): {"tool_07"}}, generation=2)
    assert scanned == ["tool_07"]
    assert snap.id == reference_snapshot(loader.config).id


def test_removing_a_source_brings_back_the_tool_it_shadowed(tmp_path: Path) -> None:
    user, project = tmp_path / "user", tmp_path / "proj"
    make_tool(user, "alpha")
    make_tool(project_tools(project), "alpha")
    config = config_for(tmp_path, project=project, user=[user])
    loader = Loader(config)
    first = loader.load()
    assert [t.status for t in first.records("alpha")] == [Status.SHADOWED, Status.PENDING]
    shutil.rmtree(project / ".tooldir")
    snap = loader.rebuild({config.roots[1].path: None}, generation=2)
    assert [(t.source.value, t.status) for t in snap.records("alpha")] == [("user", Status.ACTIVE)]
    assert snap.id == reference_snapshot(config).id


def test_a_root_replaced_behind_the_loaders_back_is_reread_whole(tmp_path: Path) -> None:
    user = tmp_path / "user"
    make_tool(user, "alpha")
    make_tool(user, "beta")
    config = config_for(tmp_path, user=[user])
    loader = Loader(config)
    loader.load()
    user.rename(tmp_path / "old")
    make_tool(user, "gamma")
    snap = loader.rebuild({str(user): set()}, generation=2)  # only "touched": the identity check notices
    assert sorted(snap.by_name) == ["gamma"]
    assert snap.id == reference_snapshot(config).id


def test_root_over_the_entry_limit_is_refused_incrementally_as_in_a_cold_load(tmp_path: Path) -> None:
    user = tmp_path / "user"
    for name in ("a", "b", "c"):
        make_tool(user, name)
    config = config_for(tmp_path, user=[user], policy=Policy(limits=Limits(max_root_entries=3)))
    loader = Loader(config)
    assert len(loader.load().by_name) == 3
    (user / ".hidden").write_text("counts toward the limit")
    snap = loader.rebuild({str(user): {".hidden"}}, generation=2)
    assert [d.code for d in snap.diagnostics] == ["too-many-entries"]
    assert snap.id == reference_snapshot(config).id
    (user / ".hidden").unlink()
    snap = loader.rebuild({str(user): {".hidden"}}, generation=3)
    assert len(snap.by_name) == 3
    assert snap.id == reference_snapshot(config).id


def test_a_failed_build_raises_and_the_next_build_starts_cold(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    folder = make_tool(project_tools(project), "alpha")
    config = config_for(tmp_path, project=project)
    loader = Loader(config)
    assert loader.load().by_name["alpha"].status is Status.PENDING
    config.state_dir.mkdir(exist_ok=True)  # the first load made it (content index)
    (config.state_dir / APPROVALS).write_text("{not json")
    (folder / "run.py").write_text("print('edited while state is broken')\n")
    with pytest.raises(StateError):
        loader.rebuild({str(folder.parent): {"alpha"}}, generation=2)
    approve(config.state_dir, folder, "alpha")
    snap = loader.rebuild({}, generation=2)  # names nothing, yet the edit above is seen: cold after a failure
    assert snap.by_name["alpha"].status is Status.ACTIVE
    assert snap.id == reference_snapshot(config).id


def test_approval_written_to_state_is_picked_up_by_a_rebuild_naming_no_package(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    folder = make_tool(project_tools(project), "alpha")
    config = config_for(tmp_path, project=project)
    loader = Loader(config)
    assert loader.load().by_name["alpha"].status is Status.PENDING
    approve(config.state_dir, folder, "alpha")
    snap = loader.rebuild({}, generation=2)
    assert snap.by_name["alpha"].status is Status.ACTIVE
    assert snap.by_name["alpha"].trust.method == "approved"
