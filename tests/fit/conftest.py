"""Issue 17 is checked from a plain (non-editable) install: a wheel of this tree in a fresh venv."""

from __future__ import annotations

from pathlib import Path

import pytest
from plaininstall import PlainInstall, install_wheel


@pytest.fixture(scope="session")
def plain(tmp_path_factory: pytest.TempPathFactory) -> PlainInstall:
    return install_wheel(tmp_path_factory.mktemp("plain"))


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """An unrelated working directory (not the checkout)."""
    path = tmp_path / "elsewhere"
    path.mkdir()
    return path
