"""Safe discovery (threats fs:*): only regular, singly-linked, bounded files below the root, in
folders nobody else can write; nothing outside the root is read; nothing ever runs or blocks."""

from __future__ import annotations

import grp
import hashlib
import os
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
from toolkit import make_tool, project_tools

import tooldir
from tooldir import Policy, Snapshot, Status
from tooldir._internal.ownership import shared_group
from tooldir.model import PackageFile, Severity, Source
from tooldir.policy import Limits
from tooldir.read.discover import RootSpec, list_packages, open_root, package_digest, scan_package

CANARY_SCRIPT = """\
from pathlib import Path
Path({marker!r}).write_text("tool code ran")
"""


def load_user(root: Path, **limits: Any) -> Snapshot:
    return tooldir.load(
        project=None, user_dirs=[root], policy=Policy(limits=Limits(**limits)), state_dir=root.parent / "state"
    )


def codes(snap: Snapshot, tool: str | None = None) -> set[str]:
    return {d.code for d in snap.diagnostics if tool is None or d.tool == tool}


def status(snap: Snapshot, name: str) -> Status:
    (record,) = snap.records(name)
    return record.status


def load_bounded(fn: Any, seconds: float = 20.0) -> Any:
    """Run ``fn`` in a thread; fail (instead of hanging) if it does not return in time."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(fn()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the load blocked"
    return result[0]


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    secret = tmp_path / "secret" / "id_rsa"
    secret.parent.mkdir()
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY----- not for tools")
    return secret


def _outside_hash(outside: Path) -> str:
    return hashlib.sha256(outside.read_bytes()).hexdigest()


def _all_hashes(snap: Snapshot) -> set[str]:
    return {f.sha256 for t in snap.tools for f in t.files}


# -- a good load, and one broken tool never stopping the others ----------------------------------


def test_a_valid_user_tool_is_active_with_a_digest_covering_every_file(root: Path) -> None:
    make_tool(root, "echo_text", extra_files={"lib/helper.py": "X = 1\n"})
    snap = load_user(root)
    (record,) = snap.records("echo_text")
    assert record.status is Status.ACTIVE
    assert [f.path for f in record.files] == ["lib/helper.py", "run.py", "schema.json"]
    assert record.digest == package_digest(record.files)
    assert snap.diagnostics == ()


def test_one_broken_tool_never_stops_the_others(root: Path) -> None:
    make_tool(root, "good_one")
    make_tool(root, "bad_json", raw_manifest=b"{not json")
    make_tool(root, "good_two")
    (root / "bad_link").symlink_to(root / "good_one")
    snap = load_user(root)
    assert status(snap, "good_one") is Status.ACTIVE
    assert status(snap, "good_two") is Status.ACTIVE
    assert status(snap, "bad_json") is Status.REJECTED
    assert codes(snap, "bad_json") == {"invalid-json"}
    assert "symlink" in codes(snap, "bad_link")


def test_a_missing_root_is_simply_empty(tmp_path: Path) -> None:
    snap = load_user(tmp_path / "does-not-exist")
    assert snap.tools == ()
    assert snap.diagnostics == ()


def test_a_folder_without_a_manifest_is_reported(root: Path) -> None:
    (root / "empty_tool").mkdir()
    snap = load_user(root)
    assert codes(snap, "empty_tool") == {"missing-manifest"}
    assert status(snap, "empty_tool") is Status.REJECTED


def test_a_stray_file_in_the_root_is_an_info_and_hidden_entries_are_skipped(root: Path) -> None:
    make_tool(root, "real_tool")
    (root / "README.md").write_text("notes")
    make_tool(root, ".git")
    snap = load_user(root)
    assert [t.name for t in snap.tools] == ["real_tool"]
    (diag,) = snap.diagnostics
    assert (diag.code, str(diag.severity)) == ("stray-file", "info")


def test_discovery_never_runs_or_imports_package_code(root: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran.marker"
    script = CANARY_SCRIPT.format(marker=str(marker))
    make_tool(root, "canary", script=script, extra_files={"sitecustomize.py": script, "__init__.py": script})
    snap = load_user(root)
    assert status(snap, "canary") is Status.ACTIVE
    assert not marker.exists()


# -- fs:symlink -----------------------------------------------------------------------------------


def test_symlinked_manifest_is_rejected_and_nothing_outside_root_is_read(root: Path, outside: Path) -> None:
    folder = make_tool(root, "linked_manifest")
    (folder / "schema.json").unlink()
    (folder / "schema.json").symlink_to(outside)
    snap = load_user(root)
    assert codes(snap, "linked_manifest") == {"symlink"}
    assert status(snap, "linked_manifest") is Status.REJECTED
    assert _outside_hash(outside) not in _all_hashes(snap)


def test_symlinked_package_file_is_rejected(root: Path, outside: Path) -> None:
    folder = make_tool(root, "linked_script")
    (folder / "run.py").unlink()
    (folder / "run.py").symlink_to(outside)
    snap = load_user(root)
    assert codes(snap, "linked_script") == {"symlink"}
    assert _outside_hash(outside) not in _all_hashes(snap)


def test_symlinked_subfolder_inside_a_package_is_rejected(root: Path, outside: Path) -> None:
    folder = make_tool(root, "linked_dir")
    (folder / "data").symlink_to(outside.parent, target_is_directory=True)
    snap = load_user(root)
    assert codes(snap, "linked_dir") == {"symlink"}
    assert _outside_hash(outside) not in _all_hashes(snap)


def test_symlinked_tool_folder_is_not_followed(root: Path, tmp_path: Path) -> None:
    elsewhere = make_tool(tmp_path / "elsewhere", "sneaky")
    (root / "sneaky").symlink_to(elsewhere, target_is_directory=True)
    snap = load_user(root)
    assert codes(snap, "sneaky") == {"symlink"}
    assert [t.status for t in snap.records("sneaky")] == []  # never became a tool


@pytest.mark.parametrize("component", [".tooldir", ".tooldir/tools"])
def test_symlinked_project_root_component_loads_nothing(tmp_path: Path, component: str) -> None:
    elsewhere = project_tools(tmp_path / "elsewhere")
    make_tool(elsewhere, "from_elsewhere")
    project = tmp_path / "project"
    project.mkdir()
    if component == ".tooldir":
        (project / ".tooldir").symlink_to(elsewhere.parent, target_is_directory=True)
    else:
        (project / ".tooldir").mkdir()
        (project / ".tooldir" / "tools").symlink_to(elsewhere, target_is_directory=True)
    snap = tooldir.load(project=project, user_dirs=[], state_dir=tmp_path / "state")
    assert snap.tools == ()
    assert codes(snap) == {"symlink"}


# -- fs:prefix ------------------------------------------------------------------------------------


def test_a_sibling_sharing_the_roots_string_prefix_is_not_inside_the_root(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools2 = tmp_path / "tools2"
    make_tool(tools, "inside")
    make_tool(tools2, "outside_sibling")
    snap = load_user(tools)
    assert [t.name for t in snap.tools] == ["inside"]
    assert all(not (t.path or "").startswith(str(tools2)) for t in snap.tools)


def test_a_link_from_the_root_into_a_prefix_sibling_is_refused(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    make_tool(tools, "inside")
    sibling = make_tool(tmp_path / "tools2", "escape")
    (tools / "escape").symlink_to(sibling, target_is_directory=True)
    snap = load_user(tools)
    assert codes(snap, "escape") == {"symlink"}
    assert [t.name for t in snap.tools] == ["inside"]


def test_root_components_are_opened_by_descriptor_not_by_string(tmp_path: Path) -> None:
    project = tmp_path / "project"
    make_tool(project_tools(project), "proj_tool")
    spec = RootSpec(Source.PROJECT, str(project), (".tooldir", "tools"))
    fd, diags = open_root(spec)
    assert fd is not None and diags == []
    try:
        listed = list_packages(fd, spec, Limits())
        assert listed is not None
        names, _ = listed
        assert names == ["proj_tool"]
        scan = scan_package(fd, spec, "proj_tool", Limits())
        assert scan.path == str(project / ".tooldir" / "tools" / "proj_tool")
    finally:
        os.close(fd)


# -- fs:hardlink ----------------------------------------------------------------------------------


def test_a_hard_linked_package_file_is_rejected(root: Path, outside: Path) -> None:
    folder = make_tool(root, "linked_hard")
    (folder / "run.py").unlink()
    os.link(outside, folder / "run.py")
    snap = load_user(root)
    assert codes(snap, "linked_hard") == {"hardlink"}
    assert status(snap, "linked_hard") is Status.REJECTED


def test_a_hard_linked_manifest_is_rejected(root: Path, tmp_path: Path) -> None:
    folder = make_tool(root, "hard_manifest")
    os.link(folder / "schema.json", tmp_path / "copy.json")
    assert codes(load_user(root), "hard_manifest") == {"hardlink"}


# -- fs:special -----------------------------------------------------------------------------------


def test_a_fifo_manifest_never_blocks_the_load(root: Path) -> None:
    folder = make_tool(root, "fifo_manifest")
    (folder / "schema.json").unlink()
    os.mkfifo(folder / "schema.json")
    make_tool(root, "after_fifo")
    snap = load_bounded(lambda: load_user(root))
    assert codes(snap, "fifo_manifest") == {"not-regular-file"}
    assert status(snap, "after_fifo") is Status.ACTIVE


def test_a_fifo_package_file_and_a_fifo_in_the_root_never_block(root: Path) -> None:
    folder = make_tool(root, "fifo_file")
    os.mkfifo(folder / "data.bin")
    os.mkfifo(root / "pipe")
    snap = load_bounded(lambda: load_user(root))
    assert codes(snap, "fifo_file") == {"not-regular-file"}
    assert codes(snap, "pipe") == {"not-regular-file"}


def test_a_socket_in_a_package_is_not_a_regular_file(root: Path) -> None:
    folder = make_tool(root, "sock_tool")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(folder / "s.sock"))
        snap = load_bounded(lambda: load_user(root))
    finally:
        sock.close()
    assert codes(snap, "sock_tool") == {"not-regular-file"}


def test_a_folder_named_schema_json_is_not_a_regular_file(root: Path) -> None:
    folder = root / "dir_manifest"
    (folder / "schema.json").mkdir(parents=True)
    assert codes(load_user(root), "dir_manifest") == {"not-regular-file"}


# -- fs:perms -------------------------------------------------------------------------------------


def shared_gid() -> int:
    """A group this process may give its files that is not its own private group (it has, or can
    have, other members): files writable by it are writable by others."""
    candidates = [g.gr_gid for g in grp.getgrall()] if os.geteuid() == 0 else os.getgroups()
    for gid in candidates:
        if shared_group(os.geteuid(), gid) is not None:
            return gid
    pytest.fail("this user belongs to no group but its private one; run the suite as root (CI does)")


@pytest.mark.parametrize("mode", [0o775, 0o757, 0o777], ids=["group-writable", "world-writable", "both"])
def test_a_writable_by_others_user_root_loads_nothing(root: Path, mode: int) -> None:
    make_tool(root, "in_open_root")
    os.chown(root, -1, shared_gid())
    root.chmod(mode)
    snap = load_user(root)
    assert snap.tools == ()
    assert codes(snap) == {"unsafe-permissions"}


def test_a_group_writable_project_tools_folder_loads_nothing(tmp_path: Path) -> None:
    project = tmp_path / "project"
    tools = project_tools(project)
    make_tool(tools, "proj")
    os.chown(tools, -1, shared_gid())
    tools.chmod(0o775)
    snap = tooldir.load(project=project, user_dirs=[], state_dir=tmp_path / "state")
    assert snap.tools == ()
    assert codes(snap) == {"unsafe-permissions"}


@pytest.mark.parametrize(
    "target",
    ["", "schema.json", "run.py", "lib", "lib/helper.py"],
    ids=["tool-folder", "manifest", "script", "subfolder", "nested-file"],
)
def test_anything_writable_by_others_inside_a_package_rejects_it(root: Path, target: str) -> None:
    folder = make_tool(root, "perm_tool", extra_files={"lib/helper.py": "X = 1\n"})
    make_tool(root, "neighbour")
    path = folder / target if target else folder
    os.chown(path, -1, shared_gid())
    path.chmod(0o777 if path.is_dir() else 0o666)
    snap = load_user(root)
    assert codes(snap, "perm_tool") == {"unsafe-permissions"}
    assert status(snap, "perm_tool") is Status.REJECTED
    assert status(snap, "neighbour") is Status.ACTIVE


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
@pytest.mark.parametrize("target", ["", "schema.json", "run.py"], ids=["tool-folder", "manifest", "script"])
def test_a_package_part_owned_by_another_user_rejects_it(root: Path, target: str) -> None:
    folder = make_tool(root, "foreign")
    os.chown(folder / target if target else folder, 12345, 12345)
    snap = load_user(root)
    assert codes(snap, "foreign") == {"unsafe-permissions"}
    assert any("owned by uid 12345" in d.message for d in snap.diagnostics)


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
def test_a_user_root_owned_by_another_user_loads_nothing(root: Path) -> None:
    make_tool(root, "anything")
    os.chown(root, 12345, 12345)
    snap = load_user(root)
    assert snap.tools == ()
    assert codes(snap) == {"unsafe-permissions"}


# -- fs:size --------------------------------------------------------------------------------------


def test_a_root_with_too_many_entries_is_refused_whole(root: Path) -> None:
    for i in range(6):
        make_tool(root, f"tool_{i}")
    snap = load_user(root, max_root_entries=5)
    assert snap.tools == ()
    assert codes(snap) == {"too-many-entries"}
    assert len(load_user(root, max_root_entries=6).tools) == 6


def test_a_refused_root_is_reported_with_the_policy_key_to_raise_and_other_roots_still_load(tmp_path: Path) -> None:
    crowded, other = tmp_path / "crowded", tmp_path / "other"
    for i in range(4):
        make_tool(crowded, f"tool_{i}")
    make_tool(other, "kept_tool")
    snap = tooldir.load(
        project=None,
        user_dirs=[crowded, other],
        policy=Policy(limits=Limits(max_root_entries=3)),
        state_dir=tmp_path / "state",
    )
    assert [t.name for t in snap.tools] == ["kept_tool"]
    (diag,) = snap.diagnostics
    assert (diag.code, diag.severity, diag.path, diag.tool) == ("too-many-entries", Severity.ERROR, str(crowded), None)
    assert "limits.max_root_entries" in diag.message


def test_the_default_root_entry_limit_admits_a_root_of_100k_packages() -> None:
    assert Limits().max_root_entries >= 100_000


def test_an_oversized_manifest_is_too_large(root: Path) -> None:
    make_tool(root, "big_manifest", description="x" * 2000)
    make_tool(root, "small_manifest")
    snap = load_user(root, max_manifest_bytes=1024)
    assert codes(snap, "big_manifest") == {"too-large"}
    assert status(snap, "small_manifest") is Status.ACTIVE


def test_an_oversized_package_file_is_too_large(root: Path) -> None:
    make_tool(root, "big_file", extra_files={"blob.bin": b"\0" * 5000})
    assert codes(load_user(root, max_file_bytes=4096), "big_file") == {"too-large"}


def test_a_package_over_the_total_size_limit_is_too_large(root: Path) -> None:
    make_tool(root, "heavy", extra_files={f"part{i}.bin": b"\0" * 1000 for i in range(3)})
    assert codes(load_user(root, max_package_bytes=2048), "heavy") == {"too-large"}


def test_a_package_with_too_many_files_is_refused(root: Path) -> None:
    make_tool(root, "many_files", extra_files={f"f{i}.txt": "x" for i in range(5)})
    assert codes(load_user(root, max_package_files=4), "many_files") == {"too-many-entries"}


def test_folders_nested_too_deep_in_a_package_are_refused(root: Path) -> None:
    make_tool(root, "deep_dirs", extra_files={"a/b/c/d/e.txt": "x"})
    assert codes(load_user(root, max_package_depth=3), "deep_dirs") == {"too-deep"}
    assert codes(load_user(root, max_package_depth=5), "deep_dirs") == set()


def test_a_package_file_digest_entry_matches_its_bytes(root: Path) -> None:
    folder = make_tool(root, "hashed")
    snap = load_user(root)
    (record,) = snap.records("hashed")
    by_path = {f.path: f for f in record.files}
    assert by_path["run.py"] == PackageFile(
        "run.py",
        hashlib.sha256((folder / "run.py").read_bytes()).hexdigest(),
        (folder / "run.py").stat().st_size,
        False,
    )


def test_any_change_anywhere_in_the_package_changes_its_digest(root: Path) -> None:
    folder = make_tool(root, "digest_me", extra_files={"lib/data.txt": "v1"})
    before = load_user(root).records("digest_me")[0].digest
    (folder / "lib" / "data.txt").write_text("v2")
    after_content = load_user(root).records("digest_me")[0].digest
    (folder / "run.py").chmod(0o755)
    after_mode = load_user(root).records("digest_me")[0].digest
    (folder / "extra.txt").write_text("")
    after_new_file = load_user(root).records("digest_me")[0].digest
    assert len({before, after_content, after_mode, after_new_file}) == 4


# -- names that are not UTF-8 ---------------------------------------------------------------------


def test_a_tool_folder_whose_name_is_not_utf8_is_reported_without_being_read(root: Path) -> None:
    bad = os.fsdecode(b"tool\xff")
    make_tool(root, bad)
    make_tool(root, "fine_tool")
    snap = load_user(root)
    assert codes(snap, "tool\\xff") == {"invalid-name"}
    assert [t.status for t in snap.records("tool\\xff")] == [Status.REJECTED]
    assert snap.records("fine_tool")[0].status is Status.ACTIVE
    snap.to_json()  # every string in the snapshot can be encoded


def test_a_package_file_whose_name_is_not_utf8_rejects_the_package(root: Path) -> None:
    folder = make_tool(root, "odd_file")
    (folder / os.fsdecode(b"data\xfe.txt")).write_text("x")
    snap = load_user(root)
    assert codes(snap, "odd_file") == {"invalid-encoding"}
    assert any("data\\xfe.txt" in (d.path or "") for d in snap.diagnostics)


# -- unreadable things are diagnostics ------------------------------------------------------------


def test_an_unreadable_package_file_is_a_diagnostic_and_the_rest_still_loads(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_tool(root, "locked_out", extra_files={"secret.bin": b"x"})
    make_tool(root, "readable")
    real_open = os.open

    def refusing_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if path == "secret.bin":
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *args, **kwargs)

    # root reads every file, so the refusal a normal user would get is simulated at the syscall
    monkeypatch.setattr(os, "open", refusing_open)
    snap = load_user(root)
    (diag,) = [d for d in snap.diagnostics if d.tool == "locked_out"]
    assert diag.code == "unreadable" and diag.path == str(root / "locked_out" / "secret.bin")
    assert status(snap, "locked_out") is Status.REJECTED
    assert status(snap, "readable") is Status.ACTIVE


def test_a_user_dir_that_is_a_regular_file_is_reported_not_raised(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "tools"
    not_a_dir.write_text("oops")
    snap = load_user(not_a_dir)
    assert snap.tools == ()
    assert codes(snap) == {"not-regular-file"}
