"""A host embedding the library gets by default what the CLI gets (issue 23 item 3, host:defaults):
the user's policy file, user root and state folder; a relative state folder is refused by every
constructor that takes one."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from toolkit import make_tool

import tooldir
import tooldir.run.registry
import tooldir.snapshot.loader
import tooldir.snapshot.store
from tooldir._cli import main
from tooldir.errors import StateDirError
from tooldir.model import Status


@pytest.fixture
def strict_user(tmp_path: Path) -> Path:
    """The user's own policy file says ``preset = "strict"`` (project tools need a pin or a
    signature); the project tool is approved, which strict does not accept."""
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "tooldir"
    config.mkdir(parents=True)
    (config / "policy.toml").write_text('preset = "strict"\n')
    project = tmp_path / "project"
    make_tool(project / ".tooldir" / "tools", "approved_only")
    approval = tooldir.approve(
        tooldir.make_config(project=str(project), policy=tooldir.Policy()), "approved_only", digest=None
    )
    assert approval.name == "approved_only"
    return project


def test_the_cli_honours_the_users_strict_preset(strict_user: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["scan", "--json", "--project", str(strict_user)])
    report = json.loads(capsys.readouterr().out)
    assert {t["name"]: t["status"] for t in report["tools"]} == {"approved_only": "pending"}


def test_a_host_gets_the_users_strict_preset_from_load_make_config_and_the_registry(strict_user: Path) -> None:
    snapshot = tooldir.load(project=str(strict_user))
    assert snapshot.records("approved_only")[0].status is Status.PENDING
    config = tooldir.make_config(project=str(strict_user))
    assert config.policy.sources.project.require == ("signature", "pin")
    assert config.policy_file == str(Path(os.environ["XDG_CONFIG_HOME"]) / "tooldir" / "policy.toml")
    registry = tooldir.run.registry.Registry(tooldir.snapshot.store.SnapshotStore(snapshot))  # the README's host recipe
    assert registry.policy == config.policy
    assert tooldir.Session(tooldir.snapshot.store.SnapshotStore(snapshot), registry=registry)._policy == config.policy
    result = registry.call("approved_only", {"text": "hi"})
    assert (result.ok, result.error.code if result.error else None) == (False, "not-active")


def test_without_a_policy_file_a_host_gets_the_built_in_defaults_as_the_cli_does(tmp_path: Path) -> None:
    config = tooldir.make_config(project=None)
    assert (config.policy, config.policy_file) == (tooldir.Policy(), None)


def test_the_registry_writes_its_audit_log_into_the_users_state_folder_by_default(tmp_path: Path) -> None:
    state = Path(os.environ["XDG_STATE_HOME"]) / "tooldir"
    registry = tooldir.run.registry.Registry(tooldir.snapshot.store.SnapshotStore(tooldir.load(project=None)))
    assert registry._state_dir == state == tooldir.make_config(project=None).state_dir


@pytest.mark.parametrize(
    "build",
    [
        lambda store: tooldir.run.registry.Registry(store, state_dir="state"),
        lambda store: tooldir.run.registry.Registry(store, state_dir=Path("rel/state")),
        lambda store: tooldir.Session(store, policy=tooldir.Policy(), state_dir="state"),
        lambda store: tooldir.make_config(project=None, state_dir="state"),
        lambda store: tooldir.load(project=None, state_dir="state"),
        lambda store: tooldir.snapshot.loader.remember_load("state", []),  # type: ignore[arg-type]
    ],
    ids=["Registry", "Registry-Path", "Session", "make_config", "load", "remember_load"],
)
def test_every_library_constructor_refuses_a_relative_state_folder(
    build: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the project a relative folder would land in
    store = tooldir.snapshot.store.SnapshotStore(tooldir.load(project=None, state_dir=tmp_path / "s"))
    with pytest.raises(StateDirError, match="relative path"):
        build(store)  # type: ignore[operator]
    assert not (tmp_path / "state").exists() and not (tmp_path / "rel").exists()


def test_the_cli_refuses_a_relative_state_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scan", "--project", str(tmp_path), "--state-dir", "state"]) == 2
    assert "--state-dir 'state' is a relative path" in capsys.readouterr().err
