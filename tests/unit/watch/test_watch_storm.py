"""watch:storm — thousands of changes (rename-over races included) while readers take snapshots."""

from __future__ import annotations

import json
import os
import random
import shutil
import threading
import time
from pathlib import Path

import pytest
from toolkit import make_tool, manifest, project_tools
from watchkit import check_consistent, config_for, settles_to_cold_load, watching

from tooldir.snapshot.store import Snapshot

pytestmark = pytest.mark.serial  # a storm of file events with a time bound: never beside another such test

NAMES = [f"tool_{i:02d}" for i in range(24)] + ["Tool_00", "t0ol_01"]  # a collision and a look-alike
OPERATIONS = 3000


def _clear(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _write_over(target: Path, data: bytes, rng: random.Random) -> None:
    """Write a temp file next to ``target`` and rename it over the target (atomic replace)."""
    tmp = target.parent / f".{target.name}.{rng.randrange(1 << 30)}.tmp"
    tmp.write_bytes(data)
    os.replace(tmp, target)


def writer(roots: list[Path], outside: Path, seed: int, count: list[int]) -> None:
    rng = random.Random(seed)
    for _ in range(OPERATIONS):
        root = rng.choice(roots)
        name = rng.choice(NAMES)
        folder = root / name
        op = rng.randrange(100)
        if not root.is_dir():
            root.mkdir(parents=True)
        if folder.is_symlink() or folder.is_file():
            folder.unlink()
        elif op < 30:  # rewrite the manifest by rename-over
            folder.mkdir(exist_ok=True)
            data = manifest(name, description=f"{name} revision {rng.randrange(1 << 20)}")
            _write_over(folder / "schema.json", json.dumps(data).encode(), rng)
            if not (folder / "run.py").exists():
                (folder / "run.py").write_text("print('hi')\n")
        elif op < 50:  # edit the script in place
            if folder.is_dir():
                (folder / "run.py").write_text(f"print({rng.randrange(1 << 20)})\n")
        elif op < 62:  # build a package elsewhere in the root and rename it into place
            staging = root / f".staging-{rng.randrange(1 << 30)}"
            make_tool(staging.parent, staging.name)
            (staging / "schema.json").write_text(json.dumps(manifest(name)))
            _clear(folder)
            staging.rename(folder)
        elif op < 72:
            _clear(folder)
        elif op < 82:  # rename a package to another name (over an empty spot only: dirs cannot be renamed over)
            other = root / rng.choice(NAMES)
            if folder.is_dir() and not other.exists() and not other.is_symlink():
                folder.rename(other)
        elif op < 88:  # swap in a symlink to a valid package outside the root
            _clear(folder)
            if not (outside / name).exists():
                make_tool(outside, name)
            folder.symlink_to(outside / name)
        elif op < 93:
            _clear(folder)
            folder.write_text("a stray file")
        elif op < 96:  # nested folder inside a package
            if folder.is_dir():
                (folder / "lib" / "deep").mkdir(parents=True, exist_ok=True)
                (folder / "lib" / "deep" / "x.py").write_text(str(rng.random()))
        elif op < 98 and root.name == "user":  # the whole root goes away and comes back
            shutil.rmtree(root)
            root.mkdir()
        else:
            make_tool(root, name)
        count[0] += 1


def test_readers_always_see_whole_snapshots_and_the_result_equals_a_cold_load(tmp_path: Path) -> None:
    user, project, outside = tmp_path / "user", tmp_path / "proj", tmp_path / "outside"
    user.mkdir()
    outside.mkdir()
    proot = project_tools(project)
    for name in NAMES[:10]:
        make_tool(user, name)
        make_tool(proot, name)
    config = config_for(tmp_path, project=project, user=[user])
    failures: list[BaseException] = []
    checks = [0]
    done = threading.Event()
    with watching(config, debounce_s=0.01, max_delay_s=0.25) as (watcher, problems):

        def reader() -> None:
            last = 0
            try:
                while not done.is_set():
                    snap: Snapshot = watcher.store.current  # taken once per operation
                    assert snap.generation >= last, "generation went backwards"
                    last = snap.generation
                    check_consistent(snap, recompute_id=checks[0] % 10 == 0)
                    checks[0] += 1
                    done.wait(0.002)  # leave the writer and the watcher some of the GIL
            except BaseException as exc:
                failures.append(exc)

        readers = [threading.Thread(target=reader, name=f"storm-reader-{i}") for i in range(3)]
        for t in readers:
            t.start()
        count = [0]
        started = time.monotonic()
        try:
            writer([user, proot], outside, seed=7, count=count)
        finally:
            done.set()
            for t in readers:
                t.join(30)
        elapsed = time.monotonic() - started
        final = settles_to_cold_load(watcher, config, timeout=30)
        check_consistent(final)
    assert not failures, failures[0]
    assert count[0] == OPERATIONS
    assert checks[0] > 10, "readers barely ran"
    assert final.generation > 3, "the watcher published too few snapshots during the storm"
    assert [p for p in problems if p.code == "build-failed"] == []
    assert elapsed < 60
