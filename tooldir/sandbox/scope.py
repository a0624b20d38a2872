"""The memory bound through the user's systemd: ``systemd-run --user --scope`` puts the sandbox in a
transient scope unit with ``MemoryMax``, ``MemorySwapMax=0`` and ``TasksMax`` -- a cgroup v2 limit
for an unprivileged user whose systemd user manager has the memory controller delegated (the
default on current distributions).

``systemd-run --scope`` registers the scope with its own pid and only then execs the command, so
prlimit, bubblewrap and the tool are inside the scope from their first instruction (no race).
It is used only when a real probe run shows the limit in force (``memory.max`` of the probe's own
scope reads back the value asked for); as root tooldir never uses it (root gets per-run cgroups
directly, :mod:`.cgroup`, or the rlimit+seccomp bound).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from functools import cache

from .cgroup import cgroup2_mount
from .process import TRUSTED_PATH

_PROBE_BYTES = 64 * 1024 * 1024
_PROBE_TIMEOUT_S = 10


@cache
def find_systemd_run() -> str | None:
    found = shutil.which("systemd-run", path=TRUSTED_PATH)
    return os.path.realpath(found) if found else None


def scope_env() -> dict[str, str]:
    """What systemd-run needs to reach the user manager (the sandbox itself never sees it: bwrap
    clears the environment)."""
    runtime = f"/run/user/{os.getuid()}"
    return {"XDG_RUNTIME_DIR": runtime} if os.path.isdir(runtime) else {}


def scope_prefix(systemd_run: str, *, memory_bytes: int, max_tasks: int) -> list[str]:
    """``systemd-run --user --scope ... --``: the scope's limits for what follows."""
    return [
        systemd_run,
        "--user",
        "--scope",
        "--quiet",
        "--collect",
        "-p",
        f"MemoryMax={memory_bytes}",
        "-p",
        "MemorySwapMax=0",
        "-p",
        f"TasksMax={max_tasks}",
        "--",
    ]


def unusable() -> str | None:
    """None if a ``systemd-run --user --scope`` memory limit works for this user, else why not."""
    if os.geteuid() == 0:
        return "systemd-run --user is not used as root"
    return _probe(os.getuid())


@cache
def _probe(uid: int) -> str | None:
    systemd_run = find_systemd_run()
    if systemd_run is None:
        return "systemd-run is not installed"
    try:
        with open("/proc/self/mountinfo") as fh:
            mount = cgroup2_mount(fh.read())
    except OSError as exc:
        return f"cannot read /proc/self/mountinfo: {exc.strerror}"
    if mount is None:
        return "no cgroup v2 hierarchy is mounted"
    sh = shutil.which("sh", path=TRUSTED_PATH)
    if sh is None:
        return "no sh on the trusted PATH to probe with"
    read_limit = f'cat {shlex.quote(mount)}"$(sed -n "s/^0:://p" /proc/self/cgroup)/memory.max"'
    argv = [*scope_prefix(systemd_run, memory_bytes=_PROBE_BYTES, max_tasks=16), sh, "-c", read_limit]
    try:
        done = subprocess.run(
            argv, capture_output=True, timeout=_PROBE_TIMEOUT_S, check=False, env=scope_env(), cwd="/"
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"systemd-run could not be started: {exc}"
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip()[:200] or f"exit status {done.returncode}"
        return f"systemd-run --user --scope does not work here: {why}"
    if done.stdout.strip() != str(_PROBE_BYTES).encode():
        return f"a systemd --user scope gets no memory limit here (memory.max: {done.stdout.strip()[:40]!r})"
    return None
