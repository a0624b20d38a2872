"""Folder entries are classified once (issue 13): tooldir.read.discover.entry_kind / mode_kind /
root_entry, used by the cold listing, the loader's incremental refresh and the watcher."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from toolkit import make_tool

from tooldir.read.discover import EntryKind, entry_kind, is_hidden, mode_kind
from tooldir.snapshot.loader import Loader, make_config


def _odd_root(root: Path, outside: Path) -> list[str]:
    """One entry of every kind directly under ``root``; returns their names."""
    make_tool(root, "good_tool")
    (root / "notes.txt").write_text("stray")
    outside.mkdir(exist_ok=True)
    (root / "linked").symlink_to(outside)
    (root / "dangling").symlink_to(outside / "missing")
    os.mkfifo(root / "pipe")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "sock"))
    sock.close()
    (root / ".hidden_dir").mkdir()
    (root / ".hidden_file").write_text("x")
    (root / os.fsdecode(b"bad\xffname")).write_text("x")
    return sorted(os.listdir(root))


def test_entry_kind_from_the_listing_and_mode_kind_from_lstat_agree_on_every_kind(tmp_path: Path) -> None:
    root = tmp_path / "tools"
    _odd_root(root, tmp_path / "outside")
    with os.scandir(root) as entries:
        kinds = {e.name: entry_kind(e) for e in entries}
    assert kinds == {name: mode_kind(os.lstat(root / name).st_mode) for name in kinds}
    assert kinds["good_tool"] is EntryKind.DIR
    assert kinds["notes.txt"] is EntryKind.FILE
    assert kinds["linked"] is kinds["dangling"] is EntryKind.LINK
    assert kinds["pipe"] is kinds["sock"] is EntryKind.OTHER
    assert is_hidden(".hidden_dir") and not is_hidden("good_tool")


def test_the_incremental_refresh_classifies_root_entries_exactly_as_the_cold_listing(tmp_path: Path) -> None:
    root = tmp_path / "tools"
    root.mkdir()
    config = make_config(project=None, user_dirs=[root], policy=None, state_dir=tmp_path / "state")
    loader = Loader(config)
    loader.load()
    names = _odd_root(root, tmp_path / "outside")
    warm = loader.rebuild({str(root): set(names)}, generation=2)
    cold = Loader(config).load(generation=2)

    def shown(snap: object) -> list[tuple[str, str | None, str | None]]:
        return sorted((d.code, d.tool, d.path) for d in snap.diagnostics)  # type: ignore[attr-defined]

    assert shown(warm) == shown(cold)
    codes = {(d.code, d.tool) for d in cold.diagnostics}
    assert {("stray-file", "notes.txt"), ("symlink", "linked"), ("symlink", "dangling")} <= codes
    assert {("not-regular-file", "pipe"), ("not-regular-file", "sock"), ("stray-file", "bad\\xffname")} <= codes
    assert not any(d.tool is not None and d.tool.startswith(".") for d in cold.diagnostics)
    assert [r.name for r in warm.records("good_tool")] == ["good_tool"]
