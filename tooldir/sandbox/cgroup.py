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

On a cgroup **v1** host (no usable v2 parent), :class:`RunCgroupV1` does the same with a child of
this process's own v1 ``memory`` cgroup (and of its ``pids`` cgroup where that hierarchy is
mounted and writable): ``memory.limit_in_bytes = memory_mb``, ``memory.memsw.limit_in_bytes`` the
same where swap is accounted, the OOM killer on, ``pids.max``. v1 charges memfd, tmpfs and shared
memory pages to the cgroup that faults them in, so this bounds the tool as a whole too. Both
flavours are a :class:`RunGroup`: the hand-over does not care which.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

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


class RunGroup(Protocol):
    """What the hand-over needs of a run's cgroup, v2 or v1 (``path`` names it in messages)."""

    path: Path

    def add(self, pid: int) -> None: ...

    def oom_killed(self) -> bool: ...

    def close(self) -> None: ...


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
        _write(self.path / name, value, optional=optional)

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
        _remove(self.path, time.monotonic() + _KILL_WAIT_S)


def _write(path: Path, value: str, *, optional: bool = False) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        if optional:
            return
        raise
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _remove(path: Path, deadline: float) -> None:
    """rmdir a run's cgroup, retrying while its last tasks exit (bounded: never fatal)."""
    pause = 0.0005
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return  # still busy (a task in D state): left for the next cleanup, never fatal
            time.sleep(pause)
            pause = min(pause * 2, 0.05)


# --------------------------------------------------------------------------- cgroup v1


def v1_dir(mountinfo: str, proc_cgroup: str, controller: str) -> Path | None:
    """This process's own cgroup directory in the v1 hierarchy of ``controller`` (from
    /proc/self/mountinfo and /proc/self/cgroup text), or None when that hierarchy is not mounted or
    the mount does not show this process's cgroup."""
    own = None
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and controller in parts[1].split(","):
            own = parts[2].strip()
    if not own:
        return None
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3 or tail[0] != "cgroup":
            continue
        if controller not in tail[2].split(","):
            continue
        root, mount = fields[3].replace("\\040", " "), fields[4].replace("\\040", " ")
        if root == "/":
            return Path(mount + own.rstrip("/")) if own != "/" else Path(mount)
        if own == root or own.startswith(root.rstrip("/") + "/"):
            return Path(mount + own[len(root) :].rstrip("/"))
    return None


@dataclass(frozen=True, slots=True)
class V1Parents:
    """Where a cgroup v1 run gets its cgroups: a child of ``memory``, and of ``pids`` if not None."""

    memory: Path
    pids: Path | None


def find_v1_parents() -> tuple[V1Parents | None, str]:
    """This process's own v1 memory (and pids) cgroups, if a run's child cgroup with a memory limit
    can really be made in them (a probe child is created and removed), else (None, why not)."""
    try:
        with open("/proc/self/mountinfo") as fh:
            mountinfo = fh.read()
        with open("/proc/self/cgroup") as fh:
            proc_cgroup = fh.read()
    except OSError as exc:
        return None, f"cannot read this process's cgroups: {exc.strerror}"
    memory = v1_dir(mountinfo, proc_cgroup, "memory")
    if memory is None:
        return None, "no cgroup v1 memory hierarchy shows this process's cgroup"
    if not os.access(memory, os.W_OK | os.X_OK):
        return None, f"{memory} is not writable by uid {os.geteuid()}"
    pids = v1_dir(mountinfo, proc_cgroup, "pids")
    if pids is not None and not os.access(pids, os.W_OK | os.X_OK):
        pids = None  # RLIMIT_NPROC still bounds the processes
    for parent in (memory, pids):
        if parent is not None:
            sweep_stale(parent)
    parents = V1Parents(memory, pids)
    try:
        RunCgroupV1.create(parents, memory_bytes=_PROBE_BYTES, max_processes=1).close()
    except OSError as exc:
        if pids is None:
            return None, f"cannot make a cgroup v1 child of {memory}: {exc.strerror or exc}"
        parents = V1Parents(memory, None)  # the pids hierarchy refused: the memory bound is what counts
        try:
            RunCgroupV1.create(parents, memory_bytes=_PROBE_BYTES, max_processes=1).close()
        except OSError as again:
            return None, f"cannot make a cgroup v1 child of {memory}: {again.strerror or again}"
    return parents, ""


_PROBE_BYTES = 64 * 1024 * 1024
_STALE_AFTER_S = 60.0
_RUN_NAME = re.compile(r"tooldir-([0-9]+)-[0-9a-f]{8}")


def sweep_stale(parent: Path, *, older_than_s: float = _STALE_AFTER_S) -> list[Path]:
    """Remove the run cgroups a tooldir process left behind when it was killed mid-run (returns
    them): named like a run's, made by a pid that is gone, older than ``older_than_s``. rmdir only
    ever removes an *empty* cgroup, so a run still going (or another pid namespace's) is never hit."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        match = _RUN_NAME.fullmatch(entry.name)
        if match is None or _alive(int(match.group(1))):
            continue
        try:
            if now - entry.stat(follow_symlinks=False).st_mtime < older_than_s:
                continue
            os.rmdir(entry.path)
        except OSError:
            continue
        removed.append(Path(entry.path))
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


class RunCgroupV1:
    """One run's cgroup v1 children (memory, and pids where usable): created with their limits,
    processes added to both, then killed and removed. v1 has no ``cgroup.kill``: the processes
    listed are killed until none is left."""

    def __init__(self, memory: Path, pids: Path | None) -> None:
        self.path = memory
        self.pids_path = pids

    def _dirs(self) -> list[Path]:
        return [self.path] if self.pids_path is None else [self.path, self.pids_path]

    @classmethod
    def create(cls, parents: V1Parents, *, memory_bytes: int, max_processes: int) -> RunCgroupV1:
        """Raises OSError when a cgroup or one of its limits cannot be set (the run must not start)."""
        name = f"tooldir-{os.getpid()}-{secrets.token_hex(4)}"
        os.mkdir(parents.memory / name, 0o755)
        group = cls(parents.memory / name, None)
        try:
            _write(group.path / "memory.limit_in_bytes", str(memory_bytes))
            # swap counts too where it is accounted (the file is absent otherwise)
            _write(group.path / "memory.memsw.limit_in_bytes", str(memory_bytes), optional=True)
            # the OOM killer on (a child inherits oom_kill_disable): over the limit the tool is killed
            _write(group.path / "memory.oom_control", "0", optional=True)
            if parents.pids is not None:
                os.mkdir(parents.pids / name, 0o755)
                group.pids_path = parents.pids / name
                _write(group.pids_path / "pids.max", str(max_processes))
        except OSError:
            group.close()
            raise
        return group

    def add(self, pid: int) -> None:
        for folder in self._dirs():
            _write(folder / "cgroup.procs", str(pid))

    def oom_killed(self) -> bool:
        """True if the memory limit made the kernel kill something in this cgroup."""
        try:
            fields = (self.path / "memory.oom_control").read_text().split()
        except OSError:
            return False
        counts = dict(zip(fields[::2], fields[1::2], strict=False))
        return counts.get("oom_kill", "0") != "0"

    def pids(self) -> list[int]:
        found: set[int] = set()
        for folder in self._dirs():
            with contextlib.suppress(OSError, ValueError):
                found.update(int(p) for p in (folder / "cgroup.procs").read_text().split())
        return sorted(found)

    def close(self) -> None:
        """Kill whatever is left in the cgroups until they are empty (bounded wait), remove them."""
        deadline = time.monotonic() + _KILL_WAIT_S
        pause = 0.0005
        while (left := self.pids()) and time.monotonic() < deadline:
            _kill_members(left, self.pids)
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        for folder in self._dirs():
            _remove(folder, deadline)


def warm_moves(parents: V1Parents) -> None:
    """Move the calling thread into the cgroup it already is in (``parents.memory``, this process's
    own cgroup), so the run's moves that follow are quick: the first move into any cgroup waits
    for an RCU grace period (milliseconds, on every cgroup v1 host), the ones within a grace period
    after it do not. A no-op otherwise; never fatal (a ``tasks`` file this user may not write just
    means no head start). Only this one thread is named, never the process, so no other thread of
    the caller is ever moved."""
    with contextlib.suppress(OSError):
        _write(parents.memory / "tasks", str(threading.get_native_id()))


def _kill_members(listed: list[int], members: Callable[[], list[int]]) -> None:
    """SIGKILL the listed processes that are still members once pinned by a pidfd: a pid that
    exited and was reused by a process elsewhere between the listing and the kill is never hit."""
    pinned: list[tuple[int, int]] = []
    try:
        for pid in listed:
            with contextlib.suppress(OSError):
                pinned.append((pid, os.pidfd_open(pid)))
        still = set(members())
        for pid, fd in pinned:
            if pid in still:
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
    finally:
        for _, fd in pinned:
            os.close(fd)
