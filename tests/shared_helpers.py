"""Test doubles shared by more than one test package (importable because conftest puts tests/ on sys.path)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

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


def native_threads() -> list[str]:
    """This process's threads as the kernel sees them (``/proc/self/task``): ``tid:name`` each."""
    found = []
    for tid in sorted(os.listdir("/proc/self/task"), key=int):
        try:
            name = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
        except OSError:
            continue  # ended while listed
        found.append(f"{tid}:{name}")
    return found


def join_native(thread: threading.Thread, cap_s: float = 60.0) -> None:
    """Join ``thread`` and wait until the kernel has ended it too. ``Thread.join`` returns once
    the thread's Python state is released, a moment *before* its OS thread exits: until then
    ``/proc/self/task`` still counts it, and a fork check (forkpool.can_fork) refuses. Fails
    after ``cap_s`` with the threads the kernel still shows."""
    native = thread.native_id
    thread.join(cap_s)
    assert not thread.is_alive(), f"thread {thread.name} still running after {cap_s}s"
    if native is None:
        return
    task = Path(f"/proc/self/task/{native}")
    deadline = time.monotonic() + cap_s
    while task.exists():
        assert time.monotonic() < deadline, (
            f"thread {thread.name} ({native}) joined but still a task: {native_threads()}"
        )
        time.sleep(0.0005)


def forge_active(record: Any, **changes: Any) -> Any:
    """TEST-ONLY factory: ``record`` with ``changes``, still active, as if the trust stage had
    granted the changed content. For tests of what the registry does with a snapshot that earlier
    stages should have refused (e.g. an input schema validation missed); it takes the trust stage's
    private seal, which nothing in tooldir outside tooldir.trust.assess ever does."""
    from dataclasses import replace

    from tooldir.model import Grant, Status
    from tooldir.trust import assess as trust

    changed = replace(record, **changes, grant=None, status=Status.PENDING)
    grant = Grant(changed.name, changed.source, changed.digest, changed.trust.method, seal=trust._SEAL)
    return replace(changed, status=Status.ACTIVE, grant=grant)


def kill_writer_after(path: Path, writer: str, lines: int) -> subprocess.Popen[bytes]:
    """Run ``python -c writer path`` and SIGKILL it once ``path`` holds ``lines`` lines (an audit
    writer killed mid-burst); returns the reaped child."""
    child = subprocess.Popen([sys.executable, "-c", writer, str(path)])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if path.exists() and path.read_bytes().count(b"\n") >= lines:
                break
            time.sleep(0.001)
        else:
            pytest.fail("the writer wrote nothing")
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    return child
