"""Running directory tools: the :class:`Sandbox` protocol and its backends.

- :mod:`.bubblewrap` — the real sandbox (``bwrap``): exact verified bytes, no home, no network
  unless allowed, no capabilities, limits, timeout, output caps.
- :mod:`.seccomp` — the hand-written seccomp filter (x86-64, aarch64): socket families, keyrings,
  tracing, mounts, io_uring, terminal injection; shared memory when no cgroup bounds the run.
- :mod:`.cgroup` — the per-run cgroup v2 (or, on a v1 host, v1) memory bound, where one can be made; :mod:`.scope` — the
  same through ``systemd-run --user --scope`` for an unprivileged user.
- :mod:`.store` — the content-addressed, verified copy of a package whose checked bytes a run gets.
- :mod:`.output` — output capping and terminal-escape stripping.
- :class:`UnsafeUnsandboxed` — runs the verified copy *without* isolation; only when the policy sets
  ``sandbox.unsafe_allow_unsandboxed`` and no sandbox works; logs a warning on every use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from ..model import ToolRecord


@dataclass(frozen=True, slots=True)
class RunRequest:
    """One run of a verified, active directory tool."""

    record: ToolRecord
    stdin: bytes
    timeout_s: float
    env: Mapping[str, str]
    network: bool


@dataclass(frozen=True, slots=True)
class RunResult:
    exit_code: int | None  # None when the run was killed (timeout, output cap)
    signal: int | None  # the signal that ended the tool's main process, if any
    stdout: bytes  # at most the cap
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    timed_out: bool
    duration_ms: float
    started: bool = True  # False when the sandbox never started the tool (set-up failed)
    memory_exceeded: bool = False  # the run's cgroup memory limit made the kernel kill it


class Sandbox(Protocol):
    """Runs one tool. Raises :class:`tooldir.SandboxError` when it cannot start the run (code
    ``sandbox-failed``) or the package no longer matches its verified hashes (``changed-since-verification``);
    a tool that runs and fails is a :class:`RunResult`, not an exception."""

    name: str

    def run(self, request: RunRequest) -> RunResult: ...


from .bubblewrap import BubblewrapSandbox, probe  # noqa: E402
from .unsafe import UnsafeUnsandboxed  # noqa: E402

__all__ = ["BubblewrapSandbox", "RunRequest", "RunResult", "Sandbox", "UnsafeUnsandboxed", "probe"]
