"""``tooldir init`` refuses a tool root reached through a symlink (issue 23 item 9, init:symlink)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tooldir._cli import main
from tooldir._cli.scaffold import create_package


def test_init_refuses_a_project_dot_tooldir_linked_into_the_users_tool_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    user_config = tmp_path / "home" / ".config" / "tooldir"
    (user_config / "tools").mkdir(parents=True)
    project = tmp_path / "project"
    project.mkdir()
    (project / ".tooldir").symlink_to(user_config)
    monkeypatch.chdir(project)
    assert main(["init", "evil_init"]) == 2
    err = capsys.readouterr().err
    assert ".tooldir is a symlink: a tool root reached through a link is refused" in err
    assert err.count("\n") == 1
    assert os.listdir(user_config / "tools") == []


def test_a_linked_tools_folder_or_deeper_component_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "p" / ".tooldir").mkdir(parents=True)
    (tmp_path / "p" / ".tooldir" / "tools").symlink_to(real)
    with pytest.raises(ValueError, match=r"tools is a symlink"):
        create_package(tmp_path / "p" / ".tooldir" / "tools" / "sub", "evil", "python")
    assert os.listdir(real) == []


def test_a_root_of_real_folders_is_created_as_before(tmp_path: Path) -> None:
    folder, files = create_package(tmp_path / "p" / ".tooldir" / "tools", "good", "python")
    assert folder == tmp_path / "p" / ".tooldir" / "tools" / "good"
    assert sorted(files) == sorted(os.listdir(folder))
