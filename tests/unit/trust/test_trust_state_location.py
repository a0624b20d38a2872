"""trust:redirect — a relative state location would make the project the user's trust state: refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from toolkit import approve, make_tool, project_tools

from tooldir._cli import main
from tooldir.errors import StateDirError
from tooldir.snapshot.loader import make_config
from tooldir.state import default_state_dir


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project that ships `.tooldir-state/approvals.json` approving its own tool, as the cwd."""
    project = tmp_path / "project"
    tool = make_tool(project_tools(project), "self_approved", risk="write")
    approve(project / ".tooldir-state", tool)
    monkeypatch.chdir(project)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "home" / ".local" / "state"))
    return project


def test_a_relative_tooldir_state_dir_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLDIR_STATE_DIR", ".tooldir-state")
    with pytest.raises(StateDirError) as caught:
        default_state_dir()
    assert (caught.value.setting, caught.value.value) == ("TOOLDIR_STATE_DIR", ".tooldir-state")


def test_a_relative_state_dir_given_to_the_python_api_is_refused() -> None:
    with pytest.raises(StateDirError):
        make_config(project=None, user_dirs=[], state_dir="state")


def test_an_absolute_or_home_relative_state_dir_is_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLDIR_STATE_DIR", str(tmp_path / "s"))
    assert default_state_dir() == tmp_path / "s"
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TOOLDIR_STATE_DIR", "~/state")
    assert default_state_dir() == tmp_path / "state"


@pytest.mark.parametrize(
    "command",
    [
        ["scan"],
        ["list"],
        ["show", "self_approved"],
        ["run", "self_approved", "--input", '{"text": "x"}'],
        ["allow", "self_approved", "--yes"],
        ["audit", "verify"],
        ["watch"],
    ],
    ids=lambda c: c[0],
)
def test_every_command_refuses_a_relative_tooldir_state_dir_with_exit_2(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    monkeypatch.setenv("TOOLDIR_STATE_DIR", ".tooldir-state")
    assert main(command) == 2
    err = capsys.readouterr().err
    assert "TOOLDIR_STATE_DIR" in err and "relative" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "command", [["scan"], ["run", "self_approved", "--input", '{"text": "x"}']], ids=["scan", "run"]
)
def test_a_relative_state_dir_option_is_refused_with_exit_2(
    project: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    assert main([*command, "--state-dir", ".tooldir-state"]) == 2
    assert "--state-dir '.tooldir-state' is a relative path" in capsys.readouterr().err


def test_the_projects_own_approvals_count_for_nothing_with_the_users_state(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["scan", "--json", "--state-dir", str(tmp_path / "state")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(t["name"], t["status"]) for t in doc["tools"]] == [("self_approved", "pending")]
    assert ("not-approved", "self_approved") in {(d["code"], d["tool"]) for d in doc["diagnostics"]}


def test_relative_project_user_dir_and_policy_paths_keep_working(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    make_tool(work / "mytools", "mine")
    make_tool(project_tools(work / "repo"), "theirs")
    (work / "policy.toml").write_text('[sources.project]\nmax_risk = "read"\n')
    monkeypatch.chdir(work)
    code = main(
        [
            "scan",
            "--json",
            "--project",
            "repo",
            "--user-dir",
            "mytools",
            "--policy",
            "policy.toml",
            "--state-dir",
            str(tmp_path / "state"),
        ]
    )
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert {(t["name"], t["status"]) for t in doc["tools"]} == {("mine", "active"), ("theirs", "pending")}
