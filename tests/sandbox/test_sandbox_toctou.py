"""trust:toctou — a file swapped between verification and execution: the verified bytes run, or
nothing runs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from toolkit import make_tool

from tooldir.policy import Policy
from tooldir.run.registry import Registry
from tooldir.snapshot.loader import Loader, make_config
from tooldir.snapshot.store import SnapshotStore

pytestmark = pytest.mark.usefixtures("sandbox_ready")

VERIFIED = 'import json, sys\njson.load(sys.stdin)\nprint(json.dumps({"ok": True, "content": "verified"}))\n'
SWAPPED = 'import json, sys\nprint(json.dumps({"ok": True, "content": "SWAPPED"}))\n'


def setup(tmp_path: Path) -> tuple[Registry, Path]:
    user = tmp_path / "user"
    folder = make_tool(user, "victim", script=VERIFIED)
    policy = Policy()
    state = tmp_path / "state"
    config = make_config(project=None, user_dirs=[user], policy=policy, state_dir=state)
    registry = Registry(SnapshotStore(Loader(config).load()), policy=policy, state_dir=state)
    return registry, folder


def test_a_file_swapped_before_the_first_run_never_runs(tmp_path: Path) -> None:
    registry, folder = setup(tmp_path)
    (folder / "run.py").write_text(SWAPPED)  # after the snapshot verified it, before any run
    result = registry.call("victim", {"text": "x"})
    assert not result.ok
    assert result.error is not None and result.error.code == "changed-since-verification"
    assert "run.py" in result.error.message
    assert "SWAPPED" not in str(result.to_json())


def test_a_file_swapped_after_a_run_is_ignored_and_the_verified_copy_runs(tmp_path: Path) -> None:
    registry, folder = setup(tmp_path)
    assert registry.call("victim", {"text": "x"}).content == "verified"
    (folder / "run.py").write_text(SWAPPED)
    again = registry.call("victim", {"text": "x"})
    assert again.ok and again.content == "verified"


def test_a_file_replaced_by_a_symlink_is_not_followed(tmp_path: Path) -> None:
    registry, folder = setup(tmp_path)
    elsewhere = tmp_path / "elsewhere.py"
    elsewhere.write_text(SWAPPED)
    (folder / "run.py").unlink()
    os.symlink(elsewhere, folder / "run.py")  # symlink out of the package
    result = registry.call("victim", {"text": "x"})
    assert result.error is not None and result.error.code == "changed-since-verification"
    assert "symbolic link" in result.error.message


def test_a_package_folder_replaced_by_a_symlink_is_not_followed(tmp_path: Path) -> None:
    registry, folder = setup(tmp_path)
    copy = tmp_path / "copy"
    folder.rename(copy)
    os.symlink(copy, folder)  # identical bytes, but reached through a link
    result = registry.call("victim", {"text": "x"})
    assert result.error is not None and result.error.code == "changed-since-verification"


def test_a_tampered_store_copy_is_never_run(tmp_path: Path) -> None:
    registry, _ = setup(tmp_path)
    assert registry.call("victim", {"text": "x"}).ok
    store = tmp_path / "state" / "sandbox" / "packages"
    (copy,) = list(store.iterdir())
    target = copy / "run.py"
    os.chmod(copy, 0o700)
    os.chmod(target, 0o644)
    target.write_text(SWAPPED)
    result = registry.call("victim", {"text": "x"})
    assert result.ok and result.content == "verified"  # re-copied from the (unchanged) package
