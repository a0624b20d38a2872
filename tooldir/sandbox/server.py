"""The sandbox of a long-lived MCP server (a ``server.json`` package, DESIGN §10).

The same profile as a tool run (:mod:`.bubblewrap`): the exact verified bytes of the package from
memory at ``/tool``, the system binds, no home, an empty environment plus the declared variables the
policy allows, no network unless declared *and* allowed, the seccomp filter, uid 65534 without
capabilities, the rlimits (memory by address space, processes, file size, CPU seconds over the
server's life) and **the same memory bound as a tool** (issue 23 item 6): one cgroup (v2 or v1,
:func:`~tooldir.sandbox.bubblewrap.run_group`) for the server's whole life with ``memory_mb``
and ``max_processes``, which every process it forks inherits -- bubblewrap is held at its
``--block-fd`` until its launcher and the sandbox's init are moved in (:meth:`PreparedServer.hold`),
so no server code runs outside it -- or the systemd user scope where that is the bound. Only with
no such bound (``rlimit+seccomp``) is shared memory denied, as for a tool.
Added for servers only: the user policy's ``sandbox.runtime_roots``, each bound read-only at its
own path and listed in ``TOOLDIR_RUNTIME_ROOTS`` (colon-separated) inside the sandbox.

This module only prepares the command line and its file descriptors; the caller spawns it (with
pipes for stdio and the environment :attr:`PreparedServer.env`), closes :attr:`PreparedServer.fds`
once the process has started, calls :meth:`PreparedServer.hold` (which releases the server), and
:meth:`PreparedServer.finish` once it has ended (the cgroup is emptied and removed).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..codes import CallErrorCode
from ..errors import SandboxError
from ..model import ToolRecord
from ..policy import SandboxPolicy
from . import scope
from .bubblewrap import (
    BWRAP_PROCESSES,
    TOOL_DIR,
    MemoryBound,
    _memfd,
    base_args,
    choose_bound,
    command_argv,
    masked_proc_args,
    package_args,
    run_group,
    sandbox_env,
    seccomp_args,
)
from .cgroup import RunGroup
from .output import CappedBuffer
from .process import Identity, _hold, identity_for, limits_prefix
from .store import verified_files


@dataclass(slots=True)
class PreparedServer:
    """What to spawn: ``argv`` (prlimit, bwrap, the server), the descriptors it must inherit
    (``fds``; close them after the spawn) and who runs it."""

    argv: list[str]
    fds: list[int]
    identity: Identity
    runtime_roots: tuple[str, ...] = field(default=())
    memory_bound: MemoryBound = "rlimit+seccomp"
    """What bounds the server's memory, as :attr:`BubblewrapSandbox.memory_bound` names a tool's."""
    group: RunGroup | None = None
    """The server's cgroup for its whole life (None: a systemd scope or rlimits bound it)."""
    release_fd: int | None = None  # write end of bubblewrap's --block-fd pipe: written to release
    info_fd: int | None = None  # read end of its --info-fd pipe (the sandbox init's pid)
    env: dict[str, str] = field(default_factory=dict)
    """The environment to spawn ``argv`` with (empty, or what systemd-run needs for a scope)."""
    oom_killed: bool = False
    """Set by :meth:`finish`: the memory bound made the kernel kill a process of the server."""
    _group_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def close(self) -> None:
        """Close the descriptors the spawned process inherited (call it once it has started)."""
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()

    def hold(self, pid: int, timeout_s: float) -> None:
        """Bubblewrap (``pid``) waits at its ``--block-fd``: move its launcher and the sandbox's
        init into the server's cgroup, then release it. Blocking (bounded by ``timeout_s``).

        Raises:
            SandboxError: ``sandbox-failed`` when it cannot be moved, or did not report in time
                (the caller kills it; nothing of the server ran).
        """
        if self.release_fd is None or self.info_fd is None:
            return
        held = _hold(
            pid, self.group, info_fd=self.info_fd, info=CappedBuffer(4096), deadline=time.perf_counter() + timeout_s
        )
        if not held:
            raise SandboxError(
                "bubblewrap did not set up the server's sandbox in time", code=CallErrorCode.SANDBOX_FAILED
            )
        os.write(self.release_fd, b"1")

    def finish(self) -> None:
        """After the server ended (its process group killed): note an OOM kill, kill whatever is
        left in its cgroup and remove it, close the pipes. Idempotent."""
        for name in ("release_fd", "info_fd"):
            fd = getattr(self, name)
            if fd is not None:
                setattr(self, name, None)
                with contextlib.suppress(OSError):
                    os.close(fd)
        with self._group_lock:  # a caller asking killed_by_memory meanwhile sees the one or the other
            group = self.group
            if group is not None:
                self.oom_killed = self.oom_killed or group.oom_killed()
                group.close()
                self.group = None

    def killed_by_memory(self) -> bool:
        """The memory bound killed a process of the server (now, or before :meth:`finish`)."""
        with self._group_lock:
            if self.oom_killed:
                return True
            return self.group is not None and self.group.oom_killed()


def server_argv(record: ToolRecord) -> list[str]:
    """``server.command`` with the interpreter resolved and argv[0] package files made absolute."""
    if record.server is None:
        raise SandboxError(f"{record.name} is not an MCP server package", code=CallErrorCode.SANDBOX_FAILED)
    return command_argv(record.server.server.command, record)


def runtime_binds(roots: tuple[str, ...]) -> tuple[list[str], tuple[str, ...]]:
    """``--ro-bind`` options for the user's runtime roots that exist (real paths, folders only)."""
    args: list[str] = []
    bound: list[str] = []
    for root in roots:
        real = os.path.realpath(root)
        if not os.path.isdir(real) or real == "/":
            continue
        args += ["--ro-bind", real, real]
        bound.append(real)
    return args, tuple(bound)


def prepare_server(
    record: ToolRecord,
    policy: SandboxPolicy,
    state_dir: Path,
    *,
    env: Mapping[str, str],
    network: bool,
) -> PreparedServer:
    """The sandboxed command line of ``record``'s server.

    Raises:
        SandboxError: ``sandbox-unavailable`` (no bwrap, prlimit or seccomp filter),
            ``changed-since-verification`` (the package no longer matches its digest),
            ``sandbox-failed`` (anything else that stops the set-up).
    """
    _, contents = verified_files(record, Path(state_dir) / "sandbox" / "packages")
    argv = server_argv(record)
    identity = identity_for(policy)
    bound = choose_bound(policy)
    fds: list[int] = []
    group: RunGroup | None = None
    release: int | None = None
    info_read: int | None = None
    wrapper: list[str] = []
    spawn_env: dict[str, str] = {}
    try:
        group = run_group(policy, bound, what="server")
        if bound.kind == "systemd-scope":
            systemd_run = scope.find_systemd_run()
            if systemd_run is None:
                raise SandboxError("systemd-run is no longer installed", code=CallErrorCode.SANDBOX_FAILED)
            wrapper = scope.scope_prefix(
                systemd_run,
                memory_bytes=policy.memory_mb * 1024 * 1024,
                max_tasks=policy.max_processes + BWRAP_PROCESSES,
            )
            spawn_env = scope.scope_env()
        bounded = bound.kind != "rlimit+seccomp"
        args = base_args(policy, network=network)
        args += seccomp_args(fds, policy, network=network, deny_shared_memory=not bounded, tool=record.name)
        args += masked_proc_args(fds)
        if group is not None:  # held until moved into its cgroup: no server code outside it
            block_read, release = os.pipe()
            fds.append(block_read)
            args += ["--block-fd", str(block_read)]
            info_read, info_write = os.pipe()
            fds.append(info_write)
            args += ["--info-fd", str(info_write)]
        binds, bound_roots = runtime_binds(policy.runtime_roots)
        args += binds
        args += package_args(record, contents, fds)
        args += ["--remount-ro", "/", "--chdir", TOOL_DIR]
        extra = dict(env)
        if bound_roots:
            extra["TOOLDIR_RUNTIME_ROOTS"] = ":".join(bound_roots)
        env_args = sandbox_env(extra)
        args += ["--args", str(_memfd(b"".join(a.encode() + b"\0" for a in env_args), fds))]
        args += ["--", *argv]
        prefix = limits_prefix(policy, identity.effective_uid, extra_fds=len(fds))
    except BaseException:
        for fd in [*fds, *(f for f in (release, info_read) if f is not None)]:
            os.close(fd)
        if group is not None:
            group.close()
        raise
    return PreparedServer(
        [*wrapper, *prefix, *args],
        fds,
        identity,
        bound_roots,
        memory_bound=bound.kind,
        group=group,
        release_fd=release,
        info_fd=info_read,
        env=spawn_env,
    )
