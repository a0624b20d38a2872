"""``tooldir scan``'s output memo (tooldir.read.scanmemo): a hit prints exactly what a fresh scan
prints; every change of an input falls back to the fresh scan; a memo that must not be trusted,
or is racily clean, is never used."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from toolkit import approve, make_tool, project_tools

import tooldir._cli.inspect as inspect_mod
import tooldir.read.index as index_mod
from tooldir._cli import main
from tooldir.read import scanmemo

SETTLE = 0.08  # longer than the RACY_NS the tests use
RACY = 50_000_000


class Loads:
    """Counts the scans that ran the library (a memo hit runs none)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = inspect_mod._load

        def counted(args: object) -> object:
            self.count += 1
            return real(args)  # type: ignore[arg-type]

        monkeypatch.setattr(inspect_mod, "_load", counted)


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> Loads:
    monkeypatch.setattr(scanmemo, "RACY_NS", RACY)
    monkeypatch.setattr(index_mod, "RACY_NS", RACY)  # or the index is rewritten by every scan of a new tree
    # other users come and go on a shared test machine (useradd): that must miss, but not here
    monkeypatch.setattr(scanmemo, "ACCOUNTS", ())
    monkeypatch.delenv("TOOLDIR_NO_INDEX", raising=False)
    monkeypatch.delenv("TOOLDIR_NO_SCAN_MEMO", raising=False)
    return Loads(monkeypatch)


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    user = tmp_path / "user"
    make_tool(user, "alpha_tool")
    make_tool(user, "beta_tool", extra_files={"lib/helper.py": "X = 1\n"})
    make_tool(user, "broken_tool", raw_manifest=b'{"name": "x", "name": "y"}')
    project = tmp_path / "project"
    project.mkdir()
    state = tmp_path / "state"
    return {"user": user, "project": project, "state": state, "tmp": tmp_path}


def argv(tree: dict[str, Path], *extra: str) -> list[str]:
    return [
        "scan",
        "--user-dir",
        str(tree["user"]),
        "--project",
        str(tree["project"]),
        "--state-dir",
        str(tree["state"]),
        *extra,
    ]


def scan(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, str]:
    code = main(args)
    return code, capsys.readouterr().out


def memos(tree: dict[str, Path]) -> list[Path]:
    index = tree["state"] / "index"
    return sorted(index.glob("scan-*.memo")) if index.exists() else []


def warm(capsys: pytest.CaptureFixture[str], args: list[str], tree: dict[str, Path], loads: Loads) -> tuple[int, str]:
    """Scan until the memo is written (the first scan writes the content index, so its memo
    would be stale at once) and the next scan is a hit; returns that hit."""
    time.sleep(SETTLE)
    for _ in range(5):
        scan(capsys, args)
        time.sleep(SETTLE)
        if memos(tree):
            before = loads.count
            hit = scan(capsys, args)
            if loads.count == before:
                return hit
    raise AssertionError("no memo hit after five scans of an unchanged tree")


def fresh(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, str]:
    """The same scan with neither the index nor the memo."""
    return scan(capsys, [*args, "--no-index"])


@pytest.mark.parametrize("fmt", ["json", "sarif", "table"])
def test_a_memo_hit_prints_byte_identical_output_to_a_fresh_scan(
    capsys: pytest.CaptureFixture[str], tree: dict[str, Path], loads: Loads, fmt: str
) -> None:
    args = argv(tree, "--format", fmt)
    hit = warm(capsys, args, tree, loads)
    assert hit == fresh(capsys, args)
    assert hit[1]


def test_a_memo_hit_returns_the_stored_exit_status(
    capsys: pytest.CaptureFixture[str], tree: dict[str, Path], loads: Loads
) -> None:
    args = argv(tree, "--json", "--strict")
    code, out = warm(capsys, args, tree, loads)
    assert code == 1  # broken_tool: duplicate-key is an error
    assert "duplicate-key" in {d["code"] for d in json.loads(out)["diagnostics"]}
    assert (code, out) == fresh(capsys, args)


def _same_size_same_mtime(tree: dict[str, Path]) -> None:
    target = tree["user"] / "alpha_tool" / "run.py"
    before = target.stat()
    data = target.read_bytes()
    target.write_bytes(data.replace(b"json.dumps", b"json.dumpz", 1))
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert target.stat().st_size == before.st_size


def _write_policy(tree: dict[str, Path]) -> None:
    policy = Path(os.environ["XDG_CONFIG_HOME"]) / "tooldir" / "policy.toml"
    policy.parent.mkdir(parents=True, exist_ok=True)
    policy.write_text("[sources.project]\nrequire = []\n")  # a weakening: scan warns policy-weakened


def _edit_policy(tree: dict[str, Path]) -> None:
    # a policy already existed when the memo was written (see CHANGES_WITH_POLICY)
    policy = Path(os.environ["XDG_CONFIG_HOME"]) / "tooldir" / "policy.toml"
    policy.write_text('[sources.user]\nmax_risk = "read"\n')


def _approval(tree: dict[str, Path]) -> None:
    approve(tree["state"], tree["user"] / "alpha_tool")


def _project_tool(tree: dict[str, Path]) -> None:
    make_tool(project_tools(tree["project"]), "gamma_tool")


def _empty_project_root(tree: dict[str, Path]) -> None:
    project_tools(tree["project"])


def _env(tree: dict[str, Path]) -> None:
    os.environ["TOOLDIR_SOMETHING_NEW"] = "1"


def _xdg(tree: dict[str, Path]) -> None:
    os.environ["XDG_DATA_HOME"] = str(tree["tmp"] / "data")


def _chmod(tree: dict[str, Path]) -> None:
    os.chmod(tree["user"] / "beta_tool" / "lib" / "helper.py", 0o600)


CHANGES: dict[str, Callable[[dict[str, Path]], None]] = {
    "a file edited keeping its size and mtime (new ctime)": _same_size_same_mtime,
    "a package added": lambda t: make_tool(t["user"], "delta_tool"),
    "a package removed": lambda t: shutil.rmtree(t["user"] / "alpha_tool"),
    "a file added to a package": lambda t: (t["user"] / "alpha_tool" / "extra.txt").write_text("x"),
    "a file added to a package's sub-folder": lambda t: (t["user"] / "beta_tool" / "lib" / "more.py").write_text(""),
    "a file removed from a package": lambda t: (t["user"] / "beta_tool" / "lib" / "helper.py").unlink(),
    "a file's mode changed": _chmod,
    "a stray file in the root": lambda t: (t["user"] / "notes.txt").write_text("x"),
    "a policy file appears": _write_policy,
    "an approval is recorded": _approval,
    "a project tool appears": _project_tool,
    "the project tool folder appears, empty": _empty_project_root,
    "a TOOLDIR_ variable is set": _env,
    "an XDG variable changes": _xdg,
}


#: changes the output does not show: they must still not be answered from the memo
SAME_OUTPUT = frozenset(
    {
        "an approval is recorded",
        "the project tool folder appears, empty",
        "a TOOLDIR_ variable is set",
        "an XDG variable changes",
        "a file's mode changed",
    }
)


@pytest.fixture
def restore_env() -> Iterator[None]:
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.mark.parametrize("change", list(CHANGES))
def test_every_input_change_falls_back_to_the_fresh_output(
    capsys: pytest.CaptureFixture[str], tree: dict[str, Path], loads: Loads, change: str, restore_env: None
) -> None:
    args = argv(tree, "--json")
    hit = warm(capsys, args, tree, loads)
    CHANGES[change](tree)
    before = loads.count
    again = scan(capsys, args)
    assert loads.count == before + 1, "the changed input was answered from the memo"
    assert again == fresh(capsys, args)
    if change not in SAME_OUTPUT:
        assert again != hit  # the change shows in the output


def test_a_policy_edit_falls_back_to_the_fresh_output(
    capsys: pytest.CaptureFixture[str], tree: dict[str, Path], loads: Loads
) -> None:
    _write_policy(tree)
    args = argv(tree, "--json")
    warm(capsys, args, tree, loads)
    _edit_policy(tree)
    before = loads.count
    again = scan(capsys, args)
    assert loads.count == before + 1
    assert again == fresh(capsys, args)
    assert "policy-weakened" not in {d["code"] for d in json.loads(again[1])["diagnostics"]}


def test_another_format_is_another_memo(
    capsys: pytest.CaptureFixture[str], tree: dict[str, Path], loads: Loads
) -> None:
    warm(capsys, argv(tree, "--json"), tree, loads)
    before = loads.count
    out = scan(capsys, argv(tree, "--format", "sarif"))
    assert loads.count == before + 1
    assert out == fresh(capsys, argv(tree, "--format", "sarif"))


def _corrupt(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-10])


def _group_writable(path: Path) -> None:
    os.chmod(path, 0o620)


def _foreign_owner(path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give the memo to another user")  # the unprivileged run covers the rest
    os.chown(path, 12345, 12345)


def _group_writable_folder(path: Path) -> None:
    os.chmod(path.parent, 0o770)  # noqa: S103 -- the point: a folder others may write to


def _forged_output(path: Path) -> None:
    """The output replaced, its sha256 in the header left: the memo no longer adds up."""
    data = path.read_bytes()
    path.write_bytes(data.replace(b"alpha_tool", b"alpha_evil", 1))


BAD_MEMOS: dict[str, Callable[[Path], None]] = {
    "corrupted": _corrupt,
    "truncated": _truncate,
    "group-writable": _group_writable,
    "foreign-owned": _foreign_owner,
    "in a group-writable folder": _group_writable_folder,
    "with forged output": _forged_output,
    "emptied": lambda p: p.write_bytes(b""),
    "not a memo": lambda p: p.write_bytes(b"tooldir-index-v1\n{}\n"),
}


@pytest.mark.parametrize("bad", list(BAD_MEMOS))
def test_a_memo_that_must_not_be_trusted_falls_back_to_the_fresh_output(
    capsys: pytest.CaptureFixture[str], tree: dict[str, Path], loads: Loads, bad: str
) -> None:
    args = argv(tree, "--json")
    warm(capsys, args, tree, loads)
    (memo,) = memos(tree)
    BAD_MEMOS[bad](memo)
    before = loads.count
    again = scan(capsys, args)
    assert loads.count == before + 1
    assert again == fresh(capsys, args)


def test_racily_clean_stats_are_never_reused(
    capsys: pytest.CaptureFixture[str], tree: dict[str, Path], loads: Loads, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = argv(tree, "--json")
    warm(capsys, args, tree, loads)
    (memo,) = memos(tree)
    # the same memo, judged with a granularity longer than the tree's age: racily clean
    monkeypatch.setattr(scanmemo, "RACY_NS", 3600 * 10**9)
    before = loads.count
    again = scan(capsys, args)
    assert loads.count == before + 1
    assert again == fresh(capsys, args)
    # and a scan of files changed within the granularity writes no memo
    memo.unlink()
    scan(capsys, args)
    scan(capsys, args)
    assert memos(tree) == []


@pytest.mark.parametrize("how", ["--no-index", "TOOLDIR_NO_INDEX", "TOOLDIR_NO_SCAN_MEMO"])
def test_the_memo_is_off_without_the_index(
    capsys: pytest.CaptureFixture[str], tree: dict[str, Path], loads: Loads, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    args = argv(tree, "--json")
    warm(capsys, args, tree, loads)
    if how == "--no-index":
        args = [*args, how]
    else:
        monkeypatch.setenv(how, "1")
    before = loads.count
    scan(capsys, args)
    assert loads.count == before + 1


def test_a_scan_with_a_project_package_writes_no_memo(
    capsys: pytest.CaptureFixture[str], tree: dict[str, Path], loads: Loads
) -> None:
    folder = make_tool(project_tools(tree["project"]), "gamma_tool")
    tree["state"].mkdir()
    approve(tree["state"], folder)
    args = argv(tree, "--json")
    time.sleep(SETTLE)
    for _ in range(3):
        scan(capsys, args)
        time.sleep(SETTLE)
    assert memos(tree) == []


def test_a_user_source_that_requires_trust_writes_no_memo(
    capsys: pytest.CaptureFixture[str], tree: dict[str, Path], loads: Loads
) -> None:
    policy = tree["tmp"] / "policy.toml"
    policy.write_text('[sources.user]\nrequire = ["approval"]\n')
    args = argv(tree, "--json", "--policy", str(policy))
    time.sleep(SETTLE)
    for _ in range(3):
        scan(capsys, args)
        time.sleep(SETTLE)
    assert memos(tree) == []


def test_list_and_show_never_read_the_memo(
    capsys: pytest.CaptureFixture[str], tree: dict[str, Path], loads: Loads
) -> None:
    args = argv(tree, "--json")
    warm(capsys, args, tree, loads)
    before = loads.count
    for command in ("list", "show"):
        cmd = [command, *(["alpha_tool"] if command == "show" else []), *args[1:]]
        assert main(cmd) == 0
        capsys.readouterr()
    assert loads.count == before + 2
