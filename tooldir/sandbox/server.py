"""The sandbox of a long-lived MCP server (a ``server.json`` package, DESIGN §10).

The same profile as a tool run (:mod:`.bubblewrap`): the exact verified bytes of the package from
memory at ``/tool``, the system binds, no home, an empty environment plus the declared variables the
policy allows, no network unless declared *and* allowed, the seccomp filter (shared memory denied,
since no per-run cgroup bounds a process that lives this long), uid 65534 without capabilities, and
the rlimits (memory by address space, processes, file size, CPU seconds over the server's life).
Added for servers only: the user policy's ``sandbox.runtime_roots``, each bound read-only at its
own path and listed in ``TOOLDIR_RUNTIME_ROOTS`` (colon-separated) inside the sandbox.

This module only prepares the command line and its file descriptors; the caller spawns it (with
pipes for stdio) and closes :attr:`PreparedServer.fds` once the process has started.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SandboxError
from ..model import ToolRecord
from ..policy import SandboxPolicy
from .bubblewrap import (
    TOOL_DIR,
    _memfd,
    base_args,
    command_argv,
    masked_proc_args,
    package_args,
    sandbox_env,
    seccomp_args,
)
from .process import Identity, identity_for, limits_prefix
from .store import verified_files


@dataclass(slots=True)
class PreparedServer:
    """What to spawn: ``argv`` (prlimit, bwrap, the server), the descriptors it must inherit
    (``fds``; close them after the spawn) and who runs it."""

    argv: list[str]
    fds: list[int]
    identity: Identity
    runtime_roots: tuple[str, ...] = field(default=())

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()


def server_argv(record: ToolRecord) -> list[str]:
    """``server.command`` with the interpreter resolved and argv[0] package files made absolute."""
    if record.server is None:
        raise SandboxError(f"{record.name} is not an MCP server package", code="sandbox-failed")
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
    fds: list[int] = []
    try:
        args = base_args(policy, network=network)
        args += seccomp_args(fds, policy, network=network, deny_shared_memory=True, tool=record.name)
        args += masked_proc_args(fds)
        binds, bound = runtime_binds(policy.runtime_roots)
        args += binds
        args += package_args(record, contents, fds)
        args += ["--remount-ro", "/", "--chdir", TOOL_DIR]
        extra = dict(env)
        if bound:
            extra["TOOLDIR_RUNTIME_ROOTS"] = ":".join(bound)
        env_args = sandbox_env(extra)
        args += ["--args", str(_memfd(b"".join(a.encode() + b"\0" for a in env_args), fds))]
        args += ["--", *argv]
        prefix = limits_prefix(policy, identity.effective_uid, extra_fds=len(fds))
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return PreparedServer([*prefix, *args], fds, identity, bound)
