from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def _isolated_user_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No test ever reads or writes the real user's config or state."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    monkeypatch.delenv("TOOLDIR_STATE_DIR", raising=False)
    os.umask(0o022)
    yield


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An empty tool root (``<tmp>/tools``) for tests that plant packages in it."""
    path = tmp_path / "tools"
    path.mkdir()
    return path
