from __future__ import annotations

import sys
from pathlib import Path

import pytest
from shared_helpers import require_sandbox

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def sandbox_ready() -> None:
    """Skip only if bubblewrap truly cannot run here, and never when TOOLDIR_REQUIRE_SANDBOX=1 (CI)."""
    require_sandbox()
