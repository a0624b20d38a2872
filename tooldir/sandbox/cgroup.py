"""A cgroup v2 per run: the memory bound that counts *everything* a tool holds (anonymous memory,
memfds, tmpfs and SysV/POSIX shared memory pages, page tables, socket buffers), which per-process
rlimits cannot.

Where one can be made: a cgroup v2 directory this process may write whose ``cgroup.subtree_control``
already enables ``memory`` and ``pids`` -- the policy's ``sandbox.cgroup_parent`` (a subtree
delegated to the user, e.g. by systemd ``Delegate=yes``), else the caller's own cgroup (the root
cgroup of a container runs processes *and* may enable controllers for its children). tooldir never
enables controllers itself: that would change the host's cgroup tree.

The run's cgroup gets ``memory.max = memory_mb``, ``memory.swap.max = 0``, ``memory.oom.group = 1``
and ``pids.max``; bubblewrap is started with ``--block-fd``, and both its processes (the launcher and
the sandbox's init, whose pid comes from ``--info-fd``) are moved in *before* the block is released,
so no tool code ever runs outside the cgroup and every process it forks inherits it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from pathlib import Path

_KILL_WAIT_S = 5.0
REQUIRED_CONTROLLERS = ("memory", "pids")


def cgroup2_mount(mountinfo: str) -> str | None:
    """The mount point of the cgroup v2 hierarchy in /proc/self/mountinfo text, or None."""
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields = left.split()
        if right.split()[:1] == ["cgroup2"] and len(fields) >= 5:
            return fields[4].replace("\\040", " ")
    return None


def own_cgroup(proc_cgroup: str) -> str | None:
    """This process's cgroup v2 path from /proc/self/cgroup text (the ``0::`` line), or None."""
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:].strip() or None
    return None


def unusable(parent: Path) -> str | None:
    """None if per-run child cgroups with a memory limit can be made under ``parent``, else why not."""
    try:
        controllers = (parent / "cgroup.subtree_control").read_text().split()
    except OSError as exc:
        return f"{parent} is not a cgroup v2 directory ({exc.strerror})"
    missing = [c for c in REQUIRED_CONTROLLERS if c not in controllers]
    if missing:
        return f"{parent}/cgroup.subtree_control does not enable {', '.join(missing)}"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{parent} is not writable by uid {os.geteuid()}"
    return None


def find_parent(configured: str | None) -> tuple[Path | None, str]:
    """The cgroup under which runs get their own cgroups, or (None, why there is none)."""
    if configured is not None:
        path = Path(configured)
        why = unusable(path)
        return (None, f"sandbox.cgroup_parent: {why}") if why else (path, "")
    try:
        with open("/proc/self/mountinfo") as fh:
            mount = cgroup2_mount(fh.read())
        with open("/proc/self/cgroup") as fh:
            own = own_cgroup(fh.read())
    except OSError as exc:
        return None, f"cannot read this process's cgroups: {exc.strerror}"
    if mount is None:
        return None, "no cgroup v2 hierarchy is mounted"
    if own is None:
        return None, "this process is in no cgroup v2 cgroup"
    path = Path(mount + own.rstrip("/")) if own != "/" else Path(mount)
    why = unusable(path)
    return (None, why) if why else (path, "")


class RunCgroup:
    """One run's cgroup: created with its limits, processes added, then killed and removed."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, parent: Path, *, memory_bytes: int, max_processes: int) -> RunCgroup:
        """Raises OSError when the cgroup or one of its limits cannot be set (the run must not start)."""
        path = parent / f"tooldir-{os.getpid()}-{secrets.token_hex(4)}"
        os.mkdir(path, 0o755)
        group = cls(path)
        try:
            group._write("memory.max", str(memory_bytes))
            group._write("memory.swap.max", "0", optional=True)  # absent without swap accounting
            group._write("memory.oom.group", "1", optional=True)  # an OOM kills the whole tool
            group._write("pids.max", str(max_processes))
        except OSError:
            group.close()
            raise
        return group

    def _write(self, name: str, value: str, *, optional: bool = False) -> None:
        try:
            fd = os.open(self.path / name, os.O_WRONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            if optional:
                return
            raise
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)

    def add(self, pid: int) -> None:
        self._write("cgroup.procs", str(pid))

    def oom_killed(self) -> bool:
        """True if the memory limit made the kernel kill something in this cgroup."""
        try:
            events = (self.path / "memory.events").read_text().split()
        except OSError:
            return False
        counts = dict(zip(events[::2], events[1::2], strict=False))
        return counts.get("oom_kill", "0") != "0"

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def close(self) -> None:
        """Kill whatever is left in the cgroup (bounded wait) and remove it."""
        try:
            self._write("cgroup.kill", "1")
        except OSError:
            for pid in self.pids():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + _KILL_WAIT_S
        pause = 0.0005
        while True:
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    return  # still busy (a task in D state): left for the next cleanup, never fatal
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
