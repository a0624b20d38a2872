"""Test doubles shared by more than one test package (importable because conftest puts tests/ on sys.path)."""

from __future__ import annotations

import os

import pytest

from tooldir.policy import SandboxPolicy
from tooldir.sandbox import RunRequest, RunResult, probe


class FakeSandbox:
    """Records every run request and answers with a fixed stdout and exit code (no bwrap needed)."""

    name = "fake"

    def __init__(self, stdout: bytes = b'{"ok": true, "content": "ran"}', exit_code: int = 0) -> None:
        self.stdout = stdout
        self.exit_code = exit_code
        self.requests: list[RunRequest] = []

    def run(self, request: RunRequest) -> RunResult:
        self.requests.append(request)
        return RunResult(self.exit_code, None, self.stdout, b"", False, False, False, 1.0)


def require_sandbox() -> None:
    """Skip the test only if bubblewrap truly cannot run here; fail instead when TOOLDIR_REQUIRE_SANDBOX=1 (CI)."""
    problem = probe(SandboxPolicy())
    if problem is None:
        return
    if os.environ.get("TOOLDIR_REQUIRE_SANDBOX") == "1":
        pytest.fail(f"the sandbox is required (TOOLDIR_REQUIRE_SANDBOX=1) but does not work: {problem}")
    pytest.skip(f"bubblewrap sandbox unavailable here: {problem}")
