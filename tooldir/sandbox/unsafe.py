"""Running without isolation: only when the policy sets ``sandbox.unsafe_allow_unsandboxed`` and no
sandbox works. The verified bytes still run (a fresh private copy, never the live package), as an
unprivileged uid when tooldir is root, with a scrubbed environment, rlimits, the timeout and output
caps; but the tool can read whatever that uid can read and use the network. Every run logs a
warning."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from ..codes import CallErrorCode
from ..errors import SandboxError
from ..policy import SandboxPolicy
from .base import RunRequest, RunResult
from .bubblewrap import TOOL_DIR, tool_argv
from .process import identity_for, spawn_and_collect
from .store import remove_tree, verified_files, write_read_only

log = logging.getLogger("tooldir")


class UnsafeUnsandboxed:
    name = "unsafe-unsandboxed"
    memory_bound = "rlimit"  # RLIMIT_AS per process only: no seccomp, no cgroup

    def __init__(self, policy: SandboxPolicy, state_dir: Path) -> None:
        self.policy = policy
        self.store_dir = Path(state_dir) / "sandbox" / "packages"
        self.identity = identity_for(policy)

    def run(self, request: RunRequest) -> RunResult:
        if request.egress is not None:  # fail closed: without a namespace nothing holds it to the list
            raise SandboxError(
                f"{request.record.name} declares a network allowlist, which only the sandbox can enforce; it is "
                "not run unsandboxed (install bubblewrap)",
                code=CallErrorCode.SANDBOX_UNAVAILABLE,
            )
        log.warning(
            "running %s WITHOUT a sandbox (policy sandbox.unsafe_allow_unsandboxed = true)", request.record.name
        )
        _, contents = verified_files(request.record, self.store_dir)
        argv = tool_argv(request.record)
        workdir = Path(tempfile.mkdtemp(prefix="tooldir-unsafe-"))
        try:
            write_read_only(workdir, request.record, contents)  # folders 0555: the (dropped) uid must enter
            if argv[0].startswith(TOOL_DIR + "/"):
                argv[0] = str(workdir / argv[0][len(TOOL_DIR) + 1 :])
            env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8", **request.env, **request.secrets}
            return spawn_and_collect(
                argv,
                stdin=request.stdin,
                env=env,
                timeout_s=request.timeout_s,
                cap=self.policy.max_output_bytes,
                policy=self.policy,
                identity=self.identity,
                cwd=str(workdir),
            )
        finally:
            remove_tree(workdir)
