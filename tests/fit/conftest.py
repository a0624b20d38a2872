"""Issue 17 is checked from a plain (non-editable) install: a wheel of this tree in a fresh venv."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from plaininstall import PlainInstall, install_wheel


@pytest.fixture(scope="session")
def plain() -> Iterator[PlainInstall]:
    # under /tmp itself, open to every user (not pytest's 0700 tmp tree), so the unprivileged tests
    # can run the same install
    where = Path(tempfile.mkdtemp(prefix="tooldir-plain-", dir="/tmp"))
    try:
        os.chmod(where, 0o755)  # noqa: S103 - read-only to others: they run it, nobody else writes it
        yield install_wheel(where)
    finally:
        shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """An unrelated working directory (not the checkout)."""
    path = tmp_path / "elsewhere"
    path.mkdir()
    return path
