"""Two common user setups that are safe and must load: a user-private group with umask 002 (files
group-writable by a group of the owner alone), and a ``~/.config`` that is a symlink (dotfile
managers). Group-writable in a shared group stays ``unsafe-permissions`` and says why."""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import unprivileged
from shared_helpers import require_sandbox
from toolkit import make_tool

import tooldir
from tooldir._cli import main
from tooldir._internal import ownership
from tooldir.model import Status
from tooldir.state import load_approvals

# --------------------------------------------------------------------------- the group decision


class _Db:
    """A fake account database: users (name, uid, primary gid) and groups (name, gid, members)."""

    def __init__(self, users: list[tuple[str, int, int]], groups: list[tuple[str, int, list[str]]]) -> None:
        self.users = [pwd.struct_passwd((n, "x", u, g, "", "/", "/bin/sh")) for n, u, g in users]
        self.groups = [grp.struct_group((n, "x", g, m)) for n, g, m in groups]

    def getpwuid(self, uid: int) -> Any:
        return next((u for u in self.users if u.pw_uid == uid), None) or _missing(uid)

    def getgrgid(self, gid: int) -> Any:
        return next((g for g in self.groups if g.gr_gid == gid), None) or _missing(gid)

    def getpwall(self) -> list[Any]:
        return self.users


def _missing(key: int) -> Any:
    raise KeyError(key)


@pytest.fixture
def accounts(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Db]:
    db = _Db(
        users=[("alice", 1000, 1000), ("bob", 1001, 1001), ("carol", 1002, 1000), ("dave", 1003, 100)],
        groups=[("alice", 1000, []), ("bob", 1001, ["bob", "eve"]), ("staff", 50, ["alice"]), ("users", 100, [])],
    )
    monkeypatch.setattr(ownership, "pwd", db)
    monkeypatch.setattr(ownership, "grp", db)
    ownership._group_verdicts.clear()
    yield db
    ownership._group_verdicts.clear()


def test_the_owners_own_group_with_no_one_else_in_it_is_private(accounts: _Db) -> None:
    accounts.users = [u for u in accounts.users if u.pw_name != "carol"]
    assert ownership.shared_group(1000, 1000) is None
    assert ownership.shared_group(1003, 100) is None  # dave's primary group, named otherwise, his alone


@pytest.mark.parametrize(
    ("uid", "gid", "says"),
    [
        (1000, 1000, "other members: carol"),  # carol's primary group is alice's
        (1001, 1001, "other members: eve"),  # listed as a member
        (1000, 50, "not alice's own group"),
        (1000, 4242, "no group entry"),
        (4242, 1000, "no user entry"),
    ],
)
def test_a_group_anyone_else_may_be_in_is_shared_and_the_reason_names_it(
    accounts: _Db, uid: int, gid: int, says: str
) -> None:
    why = ownership.shared_group(uid, gid)
    assert why is not None and says in why


# --------------------------------------------------------------------------- real loads


def test_group_writable_in_a_shared_group_is_unsafe_permissions_saying_why(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file another group needs root here; the unprivileged test below covers users")
    root = tmp_path / "tools"
    folder = make_tool(root, "shared")
    users = grp.getgrnam("users")
    assert ownership.shared_group(0, users.gr_gid) is not None
    os.chown(folder / "run.py", -1, users.gr_gid)
    (folder / "run.py").chmod(0o664)
    snap = tooldir.load(project=None, user_dirs=[root], state_dir=tmp_path / "state")
    (diag,) = [d for d in snap.diagnostics if d.tool == "shared"]
    assert (diag.code, snap.records("shared")[0].status) == ("unsafe-permissions", Status.REJECTED)
    assert "users" in diag.message and "private group" in diag.message


@pytest.fixture
def upg_user() -> Iterator[str]:
    if os.geteuid() != 0:
        pytest.skip("already unprivileged: a throwaway user needs root")
    with unprivileged.throwaway_user() as name:
        entry = pwd.getpwnam(name)
        assert grp.getgrgid(entry.pw_gid).gr_name == name  # useradd made its user-private group
        yield name


def test_an_unprivileged_users_umask_002_tools_in_their_private_group_load_and_a_shared_group_is_refused(
    upg_user: str,
) -> None:
    entry = pwd.getpwnam(upg_user)
    workdir = Path(tempfile.mkdtemp(prefix="tooldir-upg-", dir="/tmp"))
    try:
        root = workdir / "tools"
        for name in ("umask_002", "shared_group"):
            make_tool(root, name)
        for path in [root, *root.rglob("*")]:  # what the user's umask 002 makes: rwxrwxr-x / rw-rw-r--
            os.chown(path, entry.pw_uid, entry.pw_gid)
            path.chmod(0o775 if path.is_dir() else 0o664)
        os.chown(root / "shared_group" / "run.py", entry.pw_uid, grp.getgrnam("users").gr_gid)
        os.chmod(workdir, 0o700)
        os.chown(workdir, entry.pw_uid, entry.pw_gid)
        argv = [sys.executable, "-m", "tooldir", "scan", "--json", "--user-dir", str(root)]
        argv += ["--project", str(workdir), "--state-dir", str(workdir / "state")]
        done = unprivileged.run_as_user(upg_user, argv, workdir, expose=unprivileged.python_trees())
        assert done.stdout, done.stderr.decode()[-3000:]
        report = json.loads(done.stdout)
        assert {t["name"]: t["status"] for t in report["tools"]} == {"umask_002": "active", "shared_group": "rejected"}
        (diag,) = report["diagnostics"]
        assert (diag["code"], diag["tool"]) == ("unsafe-permissions", "shared_group")
        assert "users" in diag["message"] and "private group" in diag["message"]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# --------------------------------------------------------------------------- a symlinked ~/.config


@pytest.fixture
def linked_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME/.config is a symlink into a dotfiles checkout, and XDG_CONFIG_HOME is unset."""
    home = tmp_path / "home"
    real = tmp_path / "dotfiles" / "config"
    real.mkdir(parents=True)
    home.mkdir()
    (home / ".config").symlink_to(real)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME")
    (real / "tooldir").mkdir()
    (real / "tooldir" / "policy.toml").write_text('[sources.user]\nrequire = ["approval"]\n')
    make_tool(real / "tooldir" / "tools", "echo_user")
    return real


def test_with_a_symlinked_config_folder_user_tools_are_approved_and_run_by_their_real_path(
    linked_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    require_sandbox()
    common = ["--project", str(tmp_path / "home"), "--state-dir", str(tmp_path / "state")]
    linked = tmp_path / "home" / ".config" / "tooldir" / "tools" / "echo_user"
    assert main(["allow", str(linked), "--yes", *common, "--json"]) == 0  # by the path the user sees
    capsys.readouterr()
    assert list(load_approvals(tmp_path / "state")) == [str(linked_config / "tooldir" / "tools" / "echo_user")]
    assert main(["scan", *common, "--json"]) == 0
    tools = json.loads(capsys.readouterr().out)["tools"]
    assert [(t["name"], t["status"], t["trust"]) for t in tools] == [("echo_user", "active", "approved")]
    assert main(["run", "echo_user", "--input", '{"text": "hi"}', *common, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["ok"], result["content"], result["error"]) == (True, {"text": "hi"}, None)


def test_below_the_config_folder_a_symlinked_tool_root_is_still_refused(linked_config: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    shutil.move(linked_config / "tooldir" / "tools", elsewhere)
    (linked_config / "tooldir" / "tools").symlink_to(elsewhere)
    snap = tooldir.load(project=None, user_dirs=None, state_dir=tmp_path / "state")
    assert snap.tools == ()
    assert {d.code for d in snap.diagnostics} == {"symlink"}
