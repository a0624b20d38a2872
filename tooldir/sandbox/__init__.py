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

from .base import RunRequest, RunResult, Sandbox
from .bubblewrap import BubblewrapSandbox, probe
from .unsafe import UnsafeUnsandboxed

__all__ = ["BubblewrapSandbox", "RunRequest", "RunResult", "Sandbox", "UnsafeUnsandboxed", "probe"]
