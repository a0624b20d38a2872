"""Running without isolation: only when the policy sets ``sandbox.unsafe_allow_unsandboxed`` and no
sandbox works. The verified copy still runs (not the live package), with a scrubbed environment,
rlimits, the timeout and output caps; but the tool can read the user's files and use the network.
Every run logs a warning."""

from __future__ import annotations

import logging
from pathlib import Path

from ..policy import SandboxPolicy
from . import RunRequest, RunResult
from .bubblewrap import TOOL_DIR, tool_argv
from .process import Identity, spawn_and_collect
from .store import materialize

log = logging.getLogger("tooldir")


class UnsafeUnsandboxed:
    name = "unsafe-unsandboxed"

    def __init__(self, policy: SandboxPolicy, state_dir: Path) -> None:
        self.policy = policy
        self.store_dir = Path(state_dir) / "sandbox" / "packages"

    def run(self, request: RunRequest) -> RunResult:
        log.warning(
            "running %s WITHOUT a sandbox (policy sandbox.unsafe_allow_unsandboxed = true)", request.record.name
        )
        package = materialize(request.record, self.store_dir)
        argv = tool_argv(request.record)
        if argv[0].startswith(TOOL_DIR + "/"):
            argv[0] = str(package / argv[0][len(TOOL_DIR) + 1 :])
        env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8", **request.env}
        return spawn_and_collect(
            argv,
            stdin=request.stdin,
            env=env,
            timeout_s=request.timeout_s,
            cap=self.policy.max_output_bytes,
            policy=self.policy,
            identity=Identity(None, None),
            cwd=str(package),
        )
