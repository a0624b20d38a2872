"""File names a reviewer cannot tell apart (issue 11 item 8): two names in one package that are
equal after Unicode NFC normalisation are an ``ambiguous-file-name`` error, and a file name with a
control character (it can forge lines of the file listing shown at approval) is a
``control-character`` error. Either rejects the package; the others still load."""

from __future__ import annotations

from pathlib import Path

import pytest
from toolkit import make_tool

import tooldir
from tooldir import Snapshot, Status
from tooldir.model import Diagnostic

NFC = "caf\u00e9.py"
NFD = "cafe\u0301.py"


def load_user(root: Path) -> Snapshot:
    return tooldir.load(project=None, user_dirs=[root], state_dir=root.parent / "state")


def diags(snap: Snapshot, tool: str) -> list[Diagnostic]:
    return [d for d in snap.diagnostics if d.tool == tool]


def status(snap: Snapshot, name: str) -> Status:
    (record,) = snap.records(name)
    return record.status


@pytest.mark.parametrize(
    ("first", "second"),
    [(NFC, NFD), (f"lib/{NFC}", f"lib/{NFD}"), ("d\u00e9/a.py", "de\u0301/b.py")],
    ids=["files", "files-in-a-folder", "twin-folders"],
)
def test_two_file_names_equal_after_nfc_normalisation_reject_the_package(root: Path, first: str, second: str) -> None:
    make_tool(root, "twins", extra_files={first: "print('one')\n", second: "print('two')\n"})
    make_tool(root, "fine_tool")
    snap = load_user(root)
    found = diags(snap, "twins")
    assert {(d.code, str(d.severity)) for d in found} == {("ambiguous-file-name", "error")}
    assert found[0].path is not None and found[0].path.startswith(str(root / "twins"))
    assert status(snap, "twins") is Status.REJECTED
    assert status(snap, "fine_tool") is Status.ACTIVE


def test_one_non_ascii_file_name_alone_is_fine(root: Path) -> None:
    make_tool(root, "accented", extra_files={NFD: "x", "r\u00e9sum\u00e9.txt": "y"})
    snap = load_user(root)
    assert diags(snap, "accented") == []
    assert status(snap, "accented") is Status.ACTIVE


def test_names_differing_only_in_case_are_distinct_files(root: Path) -> None:
    # visibly different, and Linux file systems keep them apart: not ambiguous
    make_tool(root, "cased", extra_files={"README.md": "a", "readme.md": "b"})
    assert status(load_user(root), "cased") is Status.ACTIVE


@pytest.mark.parametrize(
    "name",
    ["run\x1b[2J.py", "notes\nschema.json", "tab\there", "del\x7f", "c1\x9b"],
    ids=["esc", "lf", "tab", "del", "c1"],
)
def test_a_file_name_with_a_control_character_rejects_the_package(root: Path, name: str) -> None:
    make_tool(root, "ctl_name", extra_files={name: "x"})
    make_tool(root, "fine_tool")
    snap = load_user(root)
    assert {(d.code, str(d.severity)) for d in diags(snap, "ctl_name")} == {("control-character", "error")}
    assert status(snap, "ctl_name") is Status.REJECTED
    assert status(snap, "fine_tool") is Status.ACTIVE
