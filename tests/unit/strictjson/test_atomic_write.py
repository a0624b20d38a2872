"""One atomic writer (issue 13): tooldir._internal.atomic.write_atomic, used by every module
that replaces a file (state, approvals, high-water marks, the verified cache, locks, keys,
signatures)."""

from __future__ import annotations

import ast
import stat
from pathlib import Path

import pytest

import tooldir
from tooldir._internal import atomic
from tooldir._internal.atomic import write_atomic

PACKAGE = Path(tooldir.__file__).parent


def test_write_atomic_replaces_the_content_with_the_mode_asked_for(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_bytes(b"old")
    write_atomic(target, b"new", mode=0o644, sync_dir=True)
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    write_atomic(target, b"newer")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_write_atomic_replaces_a_symlink_at_the_target_and_never_writes_through_it(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    link = tmp_path / "tool.lock"
    link.symlink_to(victim)
    write_atomic(link, b"lock")
    assert not link.is_symlink()
    assert link.read_bytes() == b"lock"
    assert victim.read_bytes() == b"keep"


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "approvals.json"
    target.write_bytes(b"old")

    def refuse(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "replace", refuse)
    with pytest.raises(OSError):
        write_atomic(target, b"new")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["approvals.json"]


def test_no_module_but_the_atomic_writer_renames_temp_files_over_others() -> None:
    # os.replace / mkstemp anywhere else would be a second atomic writer (the package store
    # renames a whole staged folder with os.rename and mkdtemp: a different mechanism; the drill
    # storm plays an editor saving a tool's files, not tooldir writing its own)
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == Path(atomic.__file__) or path == Path(atomic.__file__).parents[1] / "drill" / "storm.py":
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in {"replace", "mkstemp", "NamedTemporaryFile"}
                and isinstance(node.value, ast.Name)
                and node.value.id in {"os", "tempfile"}
            ):
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert offenders == []
