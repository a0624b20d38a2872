"""The files that decide trust follow discovery's ownership rule (issue 23 item 2, trust:foreign-files):
the policy file, allowed_signers, the state folder and its approvals/marks/pins, and every folder on
the way to them. One another user owns or can write is refused with an error naming it and why,
never obeyed, on the CLI's path and the library's."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import unprivileged
from toolkit import make_tool

import tooldir
import tooldir.snapshot.loader
from tooldir._cli import main
from tooldir._internal.ownership import path_problem
from tooldir.errors import PolicyError, StateError

NOBODY = 65534


@pytest.fixture
def project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    make_tool(project / ".tooldir" / "tools", "proj_tool")
    return project


def _approved_state(project: Path, state: Path) -> None:
    assert main(["allow", "proj_tool", "--yes", "--project", str(project), "--state-dir", str(state)]) == 0


def _scan(project: Path, *extra: str) -> int:
    return main(["scan", "--json", "--project", str(project), *extra])


def test_a_state_folder_others_may_write_is_refused_naming_it_on_the_cli_and_in_the_library(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "shared-state"
    _approved_state(project, state)
    state.chmod(0o777)  # as another user would pre-create it in a shared temporary folder
    capsys.readouterr()
    assert _scan(project, "--state-dir", str(state)) == 2
    err = capsys.readouterr().err
    assert f"{state}, on the way to the state file," in err and "writable by others (mode 777)" in err
    with pytest.raises(StateError) as raised:
        tooldir.load(project=str(project), state_dir=state)
    assert raised.value.path == str(state / "approvals.json")
    assert "writable by others (mode 777)" in raised.value.diagnostics()


def test_an_approvals_file_others_may_write_is_refused(project: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    _approved_state(project, state)
    (state / "approvals.json").chmod(0o666)
    with pytest.raises(StateError, match=r"refused: the state file is writable by others \(mode 666\)"):
        tooldir.load(project=str(project), state_dir=state)


def test_a_state_folder_in_a_world_writable_parent_is_refused_and_a_sticky_one_is_not(tmp_path: Path) -> None:
    parent = tmp_path / "parent"
    (parent / "state").mkdir(parents=True)
    parent.chmod(0o777)
    assert path_problem(parent / "state" / "approvals.json") == (str(parent), "writable by others (mode 777)")
    parent.chmod(0o1777)  # like /tmp: others cannot replace the user's own entries in it
    assert path_problem(parent / "state" / "approvals.json") is None


def test_writing_an_approval_into_a_state_folder_others_may_write_is_refused(project: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    state.chmod(0o777)
    assert main(["allow", "proj_tool", "--yes", "--project", str(project), "--state-dir", str(state)]) == 2
    assert not (state / "approvals.json").exists()


def test_a_world_writable_policy_file_is_refused_on_the_cli_and_in_the_library(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text("[sources.project]\nrequire = []\n")
    policy.chmod(0o666)
    assert _scan(project, "--policy", str(policy), "--state-dir", str(tmp_path / "s")) == 2
    err = capsys.readouterr().err
    assert f"invalid policy {policy}: refused: the policy file is writable by others (mode 666)" in err
    with pytest.raises(PolicyError) as raised:
        tooldir.load_policy(policy)
    assert raised.value.path == str(policy)


def test_the_users_default_policy_file_under_a_config_folder_others_may_write_is_refused(
    project: Path, tmp_path: Path
) -> None:
    config = Path(os.environ["XDG_CONFIG_HOME"])
    (config / "tooldir").mkdir(parents=True)
    (config / "tooldir" / "policy.toml").write_text("[sources.project]\nrequire = []\n")
    config.chmod(0o777)
    with pytest.raises(PolicyError, match=r"on the way to the policy file, is writable by others \(mode 777\)"):
        tooldir.load(project=str(project))
    with pytest.raises(PolicyError):
        tooldir.make_config(project=str(project))
    assert _scan(project) == 2


def test_an_allowed_signers_file_others_may_write_is_refused(project: Path, tmp_path: Path) -> None:
    signers = tmp_path / "allowed_signers"
    signers.write_text("")
    signers.chmod(0o646)
    policy = tmp_path / "policy.toml"
    policy.write_text(f'[keys]\nallowed_signers = "{signers}"\n')
    cfg = tooldir.make_config(project=str(project), policy=tooldir.load_policy(policy)[0], state_dir=tmp_path / "s")
    with pytest.raises(PolicyError) as raised:
        tooldir.snapshot.loader.Loader(cfg).load()
    assert (raised.value.path, raised.value.key) == (str(signers), "keys.allowed_signers")
    assert "writable by others (mode 646)" in raised.value.message


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_policy_file_or_state_folder_owned_by_another_user_is_refused(project: Path, tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text("[sources.project]\nrequire = []\n")
    os.chown(policy, NOBODY, NOBODY)
    with pytest.raises(PolicyError, match=rf"owned by uid {NOBODY}, not by the user \(0\) or root"):
        tooldir.load_policy(policy)
    state = tmp_path / "state"
    _approved_state(project, state)
    os.chown(state, NOBODY, NOBODY)
    with pytest.raises(StateError, match=rf"owned by uid {NOBODY}"):
        tooldir.load(project=str(project), state_dir=state)


# --------------------------------------------------------------------------- as an unprivileged user


@pytest.fixture
def user() -> object:
    if os.geteuid() != 0:
        pytest.skip("already unprivileged: a throwaway user needs root")
    with unprivileged.throwaway_user() as name:
        yield name


def test_an_unprivileged_user_refuses_a_state_folder_and_a_policy_file_of_another_user(user: str) -> None:
    entry = pwd.getpwnam(user)
    workdir = Path(tempfile.mkdtemp(prefix="tooldir-trustfiles-", dir="/tmp"))
    try:
        project = workdir / "project"
        make_tool(project / ".tooldir" / "tools", "proj_tool")
        planted = workdir / "planted-state"  # another user (here root's test) approved the tool for them
        _approved_state(project, planted)
        for path in [workdir, *workdir.rglob("*")]:
            os.chown(path, entry.pw_uid, entry.pw_gid, follow_symlinks=False)
        os.chmod(workdir, 0o700)
        for path in [planted, *planted.rglob("*")]:
            os.chown(path, NOBODY, NOBODY)
        planted.chmod(0o777)
        policy = workdir / "policy.toml"
        policy.write_text("[sources.project]\nrequire = []\n")
        os.chown(policy, NOBODY, NOBODY)
        base = [sys.executable, "-m", "tooldir", "scan", "--json", "--project", str(project)]
        runs = {
            "state": [*base, "--state-dir", str(planted)],
            "policy": [*base, "--policy", str(policy), "--state-dir", str(workdir / "own-state")],
        }
        runs["own"] = [*base, "--state-dir", str(workdir / "own-state")]
        done = {}
        for what, argv in runs.items():  # each run in a folder of its own (it makes its views there)
            (workdir / what / "home").mkdir(parents=True)
            for path in (workdir / what, workdir / what / "home"):
                os.chown(path, entry.pw_uid, entry.pw_gid)
            done[what] = unprivileged.run_as_user(user, argv, workdir / what, expose=unprivileged.python_trees())
        for what in ("state", "policy"):
            run = done[what]
            err = run.stderr.decode()
            assert run.returncode == 2, (what, run.stdout[-2000:], err[-2000:])
            assert f"owned by uid {NOBODY}, not by the user ({entry.pw_uid}) or root" in err, (what, err)
            assert "Traceback" not in err
        report = json.loads(done["own"].stdout)  # the user's own state: the tool is not approved
        assert {t["name"]: t["status"] for t in report["tools"]} == {"proj_tool": "pending"}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# --------------------------------------------------------------------------- the path walk itself


def test_a_link_is_judged_by_the_folder_holding_it_and_the_folders_on_the_way_to_its_target(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "policy.toml").write_text("")
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "policy.toml").symlink_to(real / "policy.toml")
    assert path_problem(shared / "policy.toml") is None
    shared.chmod(0o777)  # another user could re-point the link
    assert path_problem(shared / "policy.toml") == (str(shared), "writable by others (mode 777)")
    shared.chmod(0o755)
    real.chmod(0o777)  # or replace the file it leads to
    assert path_problem(shared / "policy.toml") == (str(real), "writable by others (mode 777)")


@pytest.mark.skipif(os.geteuid() != 0, reason="an entry of another user needs root")
def test_in_a_sticky_shared_folder_an_entry_of_another_user_is_refused(tmp_path: Path) -> None:
    sticky = tmp_path / "sticky"
    (sticky / "state").mkdir(parents=True)
    sticky.chmod(0o1777)
    assert path_problem(sticky / "state" / "approvals.json") is None
    os.chown(sticky / "state", NOBODY, NOBODY)
    why = f"owned by uid {NOBODY} in {sticky}, a folder others may write"
    assert path_problem(sticky / "state" / "approvals.json") == (str(sticky / "state"), why)


def test_under_umask_000_tooldir_makes_its_state_folders_private_and_keeps_loading(
    project: Path, tmp_path: Path
) -> None:
    state = tmp_path / "new" / "state"
    old = os.umask(0)
    try:
        tooldir.load(project=str(project), state_dir=state)  # writes the index: state/index/...
        _approved_state(project, state)
        snapshot = tooldir.load(project=str(project), state_dir=state)
    finally:
        os.umask(old)
    assert snapshot.records("proj_tool")[0].status.value == "active"
    assert {oct(p.stat().st_mode & 0o777) for p in (tmp_path / "new", state)} == {"0o700"}
