from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from tooldir.policy import SandboxPolicy
from tooldir.sandbox import probe


@pytest.fixture(scope="session")
def sandbox_ready() -> None:
    """Skip only if bubblewrap truly cannot run here, and never when TOOLDIR_REQUIRE_SANDBOX=1 (CI)."""
    problem = probe(SandboxPolicy())
    if problem is None:
        return
    if os.environ.get("TOOLDIR_REQUIRE_SANDBOX") == "1":
        pytest.fail(f"the sandbox is required (TOOLDIR_REQUIRE_SANDBOX=1) but does not work: {problem}")
    pytest.skip(f"bubblewrap sandbox unavailable here: {problem}")
