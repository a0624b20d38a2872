"""The bubblewrap backend.

What a tool gets (see README "Sandbox guarantees"):

- its package's **verified bytes**, recreated read-only at ``/tool`` from memfds (the working dir);
- read-only ``/usr`` and the ``/bin``, ``/lib*`` links or folders, a few ``/etc`` files Python
  needs; fresh ``/proc`` and a read-only fresh ``/dev``; size-capped tmpfs ``/tmp`` (also ``$HOME``)
  and ``/dev/shm``; nothing else:
  no user home, no ``/root``, no state dir, no ``/run``;
- ``--unshare-all`` (user, pid, ipc, uts, cgroup and network namespaces; the network only stays
  when the manifest declares it *and* the policy allows it), ``--disable-userns``,
  ``--new-session`` (no TIOCSTI into the caller's terminal), ``--die-with-parent``;
- an unprivileged uid inside (65534) and no capabilities; when tooldir runs as root, bubblewrap
  itself is started as ``sandbox.run_as_uid`` so the kernel enforces RLIMIT_NPROC and no
  privilege is ever held;
- ``--clearenv`` plus PATH/HOME/TMPDIR/LANG and the declared variables the policy allows;
- rlimits (processes, address space, CPU, file size, no core dumps, no locked memory or POSIX
  message queues), a wall-clock timeout that kills the whole process group (the pid namespace dies
  with it) and capped, sanitised output;
- a seccomp filter (x86-64, aarch64; elsewhere the run is refused unless the policy sets
  ``sandbox.unsafe_allow_no_seccomp``): only AF_UNIX sockets (plus AF_INET/AF_INET6 with network);
- ``/proc/keys`` and ``/proc/key-users`` masked by empty files (and the keyring calls denied);
- a memory bound (:attr:`BubblewrapSandbox.memory_bound`): ``cgroup`` -- a per-run cgroup v2 with
  ``memory.max = memory_mb`` counting everything the tool holds (RLIMIT_AS is then lifted, so
  runtimes that reserve address space such as node work); ``cgroup-v1`` -- the same with per-run
  children of this process's own cgroup v1 memory (and pids) cgroups, ``memory.limit_in_bytes =
  memory_mb``; ``systemd-scope`` -- the same limit
  through ``systemd-run --user --scope`` for an unprivileged user; or ``rlimit+seccomp`` --
  RLIMIT_AS = ``memory_mb + address_space_slack_mb`` per process and the calls that hold memory
  outside it (memfd_create, memfd_secret, shmget, mq_open) denied.

Every run is set up first and *held* at bubblewrap's ``--block-fd`` -- namespaces and mounts made,
the seccomp filter ready, moved into its cgroup -- and only then released to start the tool. A tool
run without network finds it set up ahead, on a long-lived thread, by one of two requests: right
after its previous run (a **spare**, from its second run on), or at the start of its call
(:meth:`BubblewrapSandbox.prepare_ahead`: the registry asks before it validates the input and checks
permission and hooks, so the set-up overlaps them). Either is exactly what the run would set up
itself, for the very same snapshot record and environment, so the run only re-reads and re-hashes
the verified bytes (as every run does) and releases it. No tool code runs before its run releases
it (a word on its stdin, read by a POSIX sh gate, not only bubblewrap's block: see
:data:`RELEASE_WORD`): a call refused by permission or a hook leaves it held. At most :data:`MAX_SPARES` are kept; one
that does not fit or died is killed, and they die with the sandbox object and with tooldir
(``--die-with-parent``; made by one long-lived thread, since bubblewrap ends with the thread that
started it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import shutil
import subprocess
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Literal

from ..codes import CallErrorCode
from ..errors import SandboxError
from ..model import ToolRecord
from ..policy import SandboxPolicy
from . import scope
from .base import RunRequest, RunResult
from .cgroup import RunCgroup, RunCgroupV1, RunGroup, V1Parents, find_parent, find_v1_parents, warm_moves
from .egress import PRELUDE, Connection, EgressProxy, proxy_env
from .process import TRUSTED_PATH, Identity, Launched, abandon, collect, identity_for, launch, limits_prefix
from .seccomp import build_filter
from .store import verified_files

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# /etc/ssl/certs and openssl.cnf, never all of /etc/ssl: /etc/ssl/private holds the host's TLS keys
# (group ssl-cert, and a user namespace keeps the caller's supplementary groups)
ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/ca-certificates",
)
NETWORK_ETC = ("/etc/resolv.conf", "/etc/hosts", "/etc/gai.conf")
SANDBOX_ID = 65534
GATE_SHELL = "/bin/sh"  # POSIX sh, under SYSTEM_DIRS: bound read-only into every sandbox
TOOL_DIR = "/tool"
MASKED_PROC = ("/proc/keys", "/proc/key-users")  # the caller's keys, by description and by owner
BWRAP_PROCESSES = 2  # bubblewrap's launcher and the sandbox's init, counted in the cgroup's pids.max
# The tool starts only after a word on its stdin, not merely once bubblewrap's --block-fd is
# readable: a killed tooldir's pipes are closed by the kernel *before* its children get the
# parent-death signal, so a held bubblewrap reads end of file and goes on (seen by hand: a
# bubblewrap held this way at --block-fd with --die-with-parent ran its command in 2 of 10 kills of
# its host). The gate is the system's POSIX sh, whose read builtin takes one byte at a time from a
# pipe (nothing of the tool's input is consumed); it exits NOT_RELEASED_EXIT at end of file.
RELEASE_WORD = b"tooldir-run\n"
NOT_RELEASED_EXIT = 125
_GATE = (
    f"IFS= read -r word || exit {NOT_RELEASED_EXIT}; "
    f'[ "$word" = {RELEASE_WORD.decode().strip()} ] || exit {NOT_RELEASED_EXIT}; exec "$@"'
)

MemoryBound = Literal["cgroup", "cgroup-v1", "systemd-scope", "rlimit+seccomp"]
log = logging.getLogger("tooldir")


@cache
def find_bwrap() -> str | None:
    found = shutil.which("bwrap", path=TRUSTED_PATH)
    return os.path.realpath(found) if found else None


@cache
def resolve_interpreter(name: str) -> str | None:
    """A bare interpreter name -> its real absolute path, found on the trusted PATH only (never a
    shim in the user's home), and only if it lives under the system folders the sandbox binds."""
    found = shutil.which(name, path=TRUSTED_PATH)
    if found is None:
        return None
    real = os.path.realpath(found)
    if not any(real == d or real.startswith(d + "/") for d in SYSTEM_DIRS):
        return None
    return real


@cache
def _system_binds() -> tuple[str, ...]:
    args: list[str] = []
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    return tuple(args)


def base_args(policy: SandboxPolicy, *, network: bool) -> list[str]:
    """Every bwrap option except the tool's package and command."""
    bwrap = find_bwrap()
    if bwrap is None:
        raise SandboxError("bubblewrap (bwrap) is not installed", code=CallErrorCode.SANDBOX_UNAVAILABLE)
    args = [bwrap, "--unshare-all", "--unshare-user"]
    if network:
        args.append("--share-net")
    args += [
        "--uid",
        str(SANDBOX_ID),
        "--gid",
        str(SANDBOX_ID),
        "--disable-userns",
        "--new-session",
        "--die-with-parent",
        "--cap-drop",
        "ALL",
        "--hostname",
        "tooldir",
        "--clearenv",
        *_system_binds(),
    ]
    for path in ETC_FILES + (NETWORK_ETC if network else ()):
        args += ["--ro-bind-try", path, path]
    scratch = str(policy.scratch_mb * 1024 * 1024)
    args += ["--proc", "/proc", "--dev", "/dev"]
    # --dev's own tmpfs has no size limit: cap /dev/shm like /tmp and make the rest of /dev read-only,
    # or a tool could fill the host's memory through it (tmpfs pages escape RLIMIT_AS)
    args += ["--size", scratch, "--perms", "1777", "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]  # noqa: S108
    args += ["--size", scratch, "--perms", "1777", "--tmpfs", "/tmp"]  # noqa: S108 - the sandbox's own tmpfs
    return args


def gate_argv() -> list[str]:
    """The sandbox's first command: wait for :data:`RELEASE_WORD` on stdin, then exec the tool's
    argv (its arguments); end of file ends the sandbox unstarted."""
    return [GATE_SHELL, "-c", _GATE, "tooldir-gate"]


def tool_argv(record: ToolRecord) -> list[str]:
    """The manifest's argv with the interpreter resolved and argv[0] package files made absolute."""
    assert record.manifest is not None  # noqa: S101 - only active tools reach the sandbox
    return command_argv(record.manifest.execute.command, record)


def command_argv(command: Sequence[str], record: ToolRecord) -> list[str]:
    """``command`` (``execute.command`` or ``server.command``) as it runs in the sandbox: argv[0]
    a package file of ``record`` made absolute under /tool, or an interpreter resolved on the
    trusted PATH."""
    argv = list(command)
    files = {f.path for f in record.files}
    head = argv[0]
    if head in files:
        argv[0] = f"{TOOL_DIR}/{head}"
    else:
        real = resolve_interpreter(head)
        if real is None:
            raise SandboxError(
                f"interpreter {head!r} was not found under {', '.join(SYSTEM_DIRS)} on {TRUSTED_PATH}",
                code=CallErrorCode.SANDBOX_FAILED,
            )
        argv[0] = real
    return argv


def prelude_argv() -> list[str]:
    """The sandbox's first process when a proxy serves it (:data:`~tooldir.sandbox.egress.PRELUDE`),
    before the inherited socket's number and the tool's argv."""
    python = resolve_interpreter("python3")
    if python is None:
        raise SandboxError(
            f"a tool with a network allowlist needs python3 under {', '.join(SYSTEM_DIRS)} (it sets up the "
            "sandbox's side of the proxy)",
            code=CallErrorCode.SANDBOX_UNAVAILABLE,
        )
    return [python, "-I", "-S", "-c", PRELUDE]


def sandbox_env(extra: dict[str, str] | None = None) -> list[str]:
    scratch = "/tmp"  # noqa: S108 - the sandbox's private tmpfs, not the host's /tmp
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": scratch,
        "TMPDIR": scratch,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.update(extra or {})
    args: list[str] = []
    for key, value in env.items():
        args += ["--setenv", key, value]
    return args


@dataclass(frozen=True, slots=True)
class Bound:
    """How a sandbox's memory is bounded: ``parent`` for per-run cgroups v2, ``v1`` for per-run
    cgroups v1; ``why`` no cgroup limit."""

    kind: MemoryBound
    parent: Path | None = None
    why: str = ""
    v1: V1Parents | None = None


def choose_bound(policy: SandboxPolicy) -> Bound:
    """A cgroup limit where one can be had -- per-run cgroups v2 under a usable parent, else (no
    ``cgroup_parent`` configured) per-run children of this process's own cgroup v1 memory cgroup,
    else a systemd user scope -- else rlimit+seccomp."""
    if policy.memory_bound == "rlimit+seccomp":
        return Bound("rlimit+seccomp", why="the policy sets sandbox.memory_bound = 'rlimit+seccomp'")
    parent, why = find_parent(policy.cgroup_parent)
    if parent is not None:
        return Bound("cgroup", parent)
    if policy.cgroup_parent is None:
        v1, v1_why = find_v1_parents()
        if v1 is not None:
            return Bound("cgroup-v1", v1=v1)
        why = f"{why}; {v1_why}"
        scope_why = scope.unusable()
        if scope_why is None:
            return Bound("systemd-scope")
        why = f"{why}; {scope_why}"
    return Bound("rlimit+seccomp", why=why)


def run_group(policy: SandboxPolicy, bound: Bound, *, what: str = "run") -> RunGroup | None:
    """The cgroup (v2 or v1) of one run -- or of one MCP server for its whole life -- with
    ``memory_mb`` and ``max_processes`` (plus bubblewrap's two), or None where ``bound`` has no
    cgroup (systemd scope, rlimit+seccomp).

    Raises:
        SandboxError: ``sandbox-unavailable`` when the policy asks for a cgroup and none can be had;
            ``sandbox-failed`` when it cannot be created (fail closed: never unbounded when promised).
    """
    if bound.kind == "rlimit+seccomp" and policy.memory_bound == "cgroup":
        raise SandboxError(
            f"sandbox.memory_bound = 'cgroup' but no cgroup limit can be had: {bound.why}",
            code=CallErrorCode.SANDBOX_UNAVAILABLE,
        )
    where = bound.parent or (bound.v1.memory if bound.v1 else None)
    if where is None:
        return None
    memory = policy.memory_mb * 1024 * 1024
    processes = policy.max_processes + BWRAP_PROCESSES
    try:
        if bound.v1 is not None:
            return RunCgroupV1.create(bound.v1, memory_bytes=memory, max_processes=processes)
        return RunCgroup.create(where, memory_bytes=memory, max_processes=processes)
    except OSError as exc:
        raise SandboxError(
            f"cannot create the {what}'s cgroup under {where}: {exc}", code=CallErrorCode.SANDBOX_FAILED
        ) from None


class BubblewrapSandbox:
    name = "bubblewrap"

    def __init__(self, policy: SandboxPolicy, state_dir: Path, *, bound: Bound | None = None) -> None:
        """``bound`` (default: :func:`choose_bound`) says how memory is bounded."""
        self.policy = policy
        self.store_dir = Path(state_dir) / "sandbox" / "packages"
        self.identity: Identity = identity_for(policy)
        self.bound = bound or choose_bound(policy)
        self.memory_bound: MemoryBound = self.bound.kind
        self._spares = _Spares()
        weakref.finalize(self, self._spares.close)  # also at exit: no spare outlives its sandbox

    def close(self) -> None:
        """Kill the spare sandboxes held and end the thread that makes them (joined). Runs after
        this still work, each setting up its own sandbox."""
        self._spares.close()
        self._spares.join()

    def _cgroup(self) -> RunGroup | None:
        return run_group(self.policy, self.bound)

    def run(self, request: RunRequest) -> RunResult:
        spare = self._spares.take(_spare_key(request)) if self._spares_allowed(request) else None
        if spare is not None:
            try:  # execution still re-reads and re-hashes the verified bytes, as every run does
                verified_files(request.record, self.store_dir)
            except BaseException:
                spare.discard()
                raise
            result = self._finish(spare, request, from_now=True)
        else:
            result = self._finish(self._prepare(request), request, from_now=False)
        if self._spares_allowed(request):
            self._spares.ask(_spare_key(request), lambda: self._prepare(request, create=False))
        return result

    def prepare_ahead(self, request: RunRequest, *, create_copy: bool = False) -> None:
        """Start setting up the sandbox of ``request`` now, in the background, for a :meth:`run`
        of the same record, network and environment that follows (its ``stdin`` is not used):
        the registry calls this at the start of a call, so the set-up overlaps the call's input
        validation, permission and hooks. It never starts the tool; only :meth:`run` releases it.
        Nothing is made where spares are not allowed (:meth:`_spares_allowed`). The background
        set-up writes nothing to the state directory (a call may be refused, and its caller gone,
        before it ends): it uses the package's verified copy only if one exists, unless
        ``create_copy`` (a host preparing its first calls, :meth:`Registry.prepare_sandboxes`)."""
        if self._spares_allowed(request):
            self._spares.ahead(_spare_key(request), lambda: self._prepare(request, create=create_copy))

    def _spares_allowed(self, request: RunRequest) -> bool:
        """A spare sandbox is made ahead only for tools without network (a tooldir killed while a
        spare waits ends its sandbox within milliseconds, but with network those could reach out)
        where bubblewrap is tooldir's own child (not under a systemd scope), and never on the
        opt-in path without a seccomp filter (it stays as it was, one logged run at a time); and
        never for a run with secrets (a held sandbox would keep their values waiting, and one made
        ahead would need them before permission and hooks said yes)."""
        return (
            not request.network
            and request.egress is None
            and not request.secrets
            and self.bound.kind != "systemd-scope"
            and not self.policy.unsafe_allow_no_seccomp
        )

    def _warm_moves(self, group: RunGroup | None) -> threading.Thread | None:
        """On cgroup v1, start the grace period the run's cgroup moves wait for now, in the
        background, while the run is set up (:func:`~tooldir.sandbox.cgroup.warm_moves`). Only
        once the run's cgroup exists: it holds the cgroup lock meanwhile, which mkdir needs."""
        if group is None or self.bound.v1 is None:
            return None
        thread = threading.Thread(target=warm_moves, args=(self.bound.v1,), name="tooldir-cgroup-warm", daemon=True)
        thread.start()
        return thread

    def _prepare(self, request: RunRequest, *, create: bool = True) -> _Prepared:
        """Everything of a run but the tool itself: the run's cgroup, the verified bytes in memfds,
        bubblewrap started, its sandbox set up (mounts, namespaces, seccomp filter loaded) and, with
        a cgroup, moved in -- held at ``--block-fd`` until :meth:`_finish` releases it."""
        _, contents = verified_files(request.record, self.store_dir, create=create)  # first: nothing to undo
        group = self._cgroup()
        warm = self._warm_moves(group)
        fds: list[int] = []
        release: int | None = None
        info_read: int | None = None
        proxy: EgressProxy | None = None
        try:
            argv = tool_argv(request.record)
            extra_env: dict[str, str] = {}
            if request.egress is not None:
                proxy = EgressProxy(request.egress)
                argv = [*prelude_argv(), str(proxy.inner_fd()), *argv]
                extra_env = proxy_env()
            argv = [*gate_argv(), *argv]
            args = base_args(self.policy, network=request.network)
            bounded = self.bound.kind != "rlimit+seccomp"
            wrapper: list[str] = []
            if self.bound.kind == "systemd-scope":
                systemd_run = scope.find_systemd_run()
                if systemd_run is None:
                    raise SandboxError("systemd-run is no longer installed", code=CallErrorCode.SANDBOX_FAILED)
                memory = self.policy.memory_mb * 1024 * 1024
                wrapper = scope.scope_prefix(
                    systemd_run, memory_bytes=memory, max_tasks=self.policy.max_processes + BWRAP_PROCESSES
                )
            # with a proxy the sandbox needs AF_INET for its loopback (its namespace has no route out)
            inet = request.network or proxy is not None
            args += seccomp_args(
                fds, self.policy, network=inet, deny_shared_memory=not bounded, tool=request.record.name
            )
            args += masked_proc_args(fds)
            block_read, release = os.pipe()
            fds.append(block_read)
            args += ["--block-fd", str(block_read)]
            args += package_args(request.record, contents, fds)
            args += ["--remount-ro", "/", "--chdir", TOOL_DIR]
            # through a memfd, not argv: the host's process list must not show env values
            # the proxy's variables last: nothing the tool is given can point it past the proxy
            env_args = sandbox_env({**request.env, **request.secrets, **extra_env})
            args += ["--args", str(_memfd(b"".join(a.encode() + b"\0" for a in env_args), fds))]
            info_read, info_write = os.pipe()
            inherited = [*fds, info_write]  # never info_read: the tool must not read (steal) bwrap's report
            if proxy is not None:
                inherited.append(proxy.inner_fd())
            args += ["--info-fd", str(info_write), "--", *argv]
            launched = launch(
                args,
                env=scope.scope_env() if wrapper else {},
                timeout_s=request.timeout_s,
                policy=self.policy,
                identity=self.identity,
                pass_fds=inherited,
                cwd="/",
                info_fd=info_read,
                close_after_spawn=(info_write,),
                address_space=None if bounded else -1,
                cgroup=group,
                release_fd=release,
                wrapper=wrapper,
            )
        except BaseException:
            for fd in (release, info_read):
                if fd is not None:
                    os.close(fd)
            if proxy is not None:
                proxy.close()
            if group is not None:
                group.close()
            if warm is not None:
                warm.join()
            raise
        finally:
            for fd in fds:  # bubblewrap holds its own copies
                os.close(fd)
        if proxy is not None:
            proxy.release_inner()
            proxy.start()
        return _Prepared(launched, group, warm, proxy)

    def _finish(self, prepared: _Prepared, request: RunRequest, *, from_now: bool) -> RunResult:
        """Release a prepared sandbox, feed and collect the tool, and remove what the run held."""
        try:
            result = collect(
                prepared.launched,
                stdin=RELEASE_WORD + request.stdin,
                timeout_s=request.timeout_s,
                cap=self.policy.max_output_bytes,
                from_now=from_now,
            )
            if prepared.group is not None and prepared.group.oom_killed():
                result = replace(result, memory_exceeded=True)
        finally:
            connections = prepared.close()
        if connections is not None:
            result = replace(result, network=tuple(c.to_json() for c in connections))
        if not result.started and not result.timed_out:
            why = result.stderr.decode("utf-8", "replace").strip()[-500:] or f"exit status {result.exit_code}"
            raise SandboxError(f"bubblewrap could not start the tool: {why}", code=CallErrorCode.SANDBOX_FAILED)
        return result


@dataclass(slots=True)
class _Prepared:
    """A sandbox set up and held before its tool runs (see :meth:`BubblewrapSandbox._prepare`)."""

    launched: Launched
    group: RunGroup | None
    warm: threading.Thread | None
    proxy: EgressProxy | None = None

    def close(self) -> list[Connection] | None:
        """Close what the run held (after :func:`collect`): its pipes, its cgroup, its proxy
        (whose connections it returns)."""
        for fd in (self.launched.release_fd, self.launched.info_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        if self.group is not None:
            self.group.close()
        if self.warm is not None:
            self.warm.join()
        return None if self.proxy is None else self.proxy.close()

    def usable(self) -> bool:
        """Still held at its block and alive (a spare may have died while it waited)."""
        return self.launched.held and self.launched.proc.poll() is None

    def discard(self) -> None:
        """Kill a prepared sandbox that will never run its tool, and remove what it held."""
        abandon(self.launched)
        self.close()


@dataclass(frozen=True, slots=True, eq=False)
class _SpareKey:
    """What a spare sandbox was made for: the very record object (snapshot records are immutable,
    so the same object means the same verified package and manifest; it is held here, so its
    identity cannot be reused while the spare waits), network and environment."""

    record: ToolRecord
    network: bool
    env: tuple[tuple[str, str], ...]

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, _SpareKey)
            and other.record is self.record
            and (other.network, other.env) == (self.network, self.env)
        )

    def __hash__(self) -> int:
        return hash((id(self.record), self.network, self.env))


def _spare_key(request: RunRequest) -> _SpareKey:
    return _SpareKey(request.record, request.network, tuple(sorted(request.env.items())))


MAX_SPARES = 4
"""Held sandboxes one :class:`BubblewrapSandbox` keeps at most (ready or queued to be made): each is
bubblewrap's two processes, a run cgroup where the memory bound has one, and its package's bytes in
its private tmpfs (at most ``limits.max_package_bytes``). The oldest goes first."""


class _Spares:
    """Spare sandboxes, each made in the background for one (record, network, environment) key
    and held at its ``--block-fd`` until a run of exactly that key releases it:

    - **after** a run (:meth:`ask`), for the next run of the same tool (from its second run on: a
      tool run once, as by ``tooldir run``, gets none);
    - **ahead** of a run (:meth:`ahead`): the registry asks at the start of a call, so the set-up
      overlaps input validation, permission and hooks; the call then waits for it in
      :meth:`take`. It releases nothing: a call that is refused leaves it held (and bounded).

    At most :data:`MAX_SPARES` are kept (ready or queued); one that does not fit (another tool, a
    new snapshot, another environment) is never used, and a dead one is discarded. Every spare left
    is killed when the sandbox object goes away or the process exits.

    Spares are made by one long-lived thread: bubblewrap's ``--die-with-parent`` ends a sandbox
    when the *thread* that started it ends, which must be the process's end, never a helper's."""

    def __init__(self) -> None:
        self._lock = threading.Condition(threading.Lock())
        self._ready: OrderedDict[_SpareKey, _Prepared] = OrderedDict()
        self._seen: set[_SpareKey] = set()
        self._wanted: OrderedDict[_SpareKey, Callable[[], _Prepared]] = OrderedDict()
        self._making: _SpareKey | None = None
        self._worker: threading.Thread | None = None
        self._closed = False

    def held(self) -> list[_Prepared]:
        """The spares ready now, oldest first."""
        with self._lock:
            return list(self._ready.values())

    def take(self, key: _SpareKey) -> _Prepared | None:
        """The spare made for ``key``, waiting for it while it is being made or next to be made;
        None when there is none (one queued behind another is dropped: the caller sets its own
        up now, on its own thread)."""
        with self._lock:
            while key not in self._ready and not self._closed and (self._making == key or self._next(key)):
                self._lock.wait()
            self._wanted.pop(key, None)
            spare = self._ready.pop(key, None)
        if spare is None:
            return None
        if spare.usable():
            return spare
        spare.discard()
        return None

    def _next(self, key: _SpareKey) -> bool:
        """``key`` is the one the idle maker takes up next."""
        return self._making is None and next(iter(self._wanted), None) == key

    def ask(self, key: _SpareKey, make: Callable[[], _Prepared]) -> None:
        """After a run of ``key``: make a spare for its next run (from the second run on)."""
        with self._lock:
            if self._closed:
                return
            if key not in self._seen:
                if len(self._seen) >= 64:
                    self._seen.clear()
                self._seen.add(key)
                return
            self._want(key, make)

    def ahead(self, key: _SpareKey, make: Callable[[], _Prepared]) -> None:
        """Before a run of ``key`` (a call just started): make its sandbox now, unless one is
        ready or being made."""
        with self._lock:
            if not self._closed:
                self._want(key, make)

    def _want(self, key: _SpareKey, make: Callable[[], _Prepared]) -> None:
        if key in self._ready or key == self._making:
            return
        self._wanted[key] = make
        self._wanted.move_to_end(key)
        while len(self._wanted) > MAX_SPARES:
            self._wanted.popitem(last=False)
        if self._worker is None:
            self._worker = threading.Thread(target=self._work, name="tooldir-spare-sandbox", daemon=True)
            self._worker.start()
        self._lock.notify_all()

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._wanted and not self._closed:
                    self._lock.wait()
                if self._closed:
                    return
                key, make = self._wanted.popitem(last=False)
                self._making = key
            try:
                spare: _Prepared | None = make()
            except Exception as exc:  # a spare is an optimisation: the run sets up its own
                log.debug("no spare sandbox: %s", exc)
                spare = None
            leftovers: list[_Prepared] = []
            with self._lock:
                self._making = None
                if spare is not None and spare.usable() and not self._closed:
                    old = self._ready.pop(key, None)
                    self._ready[key] = spare
                    leftovers += [old] if old is not None else []
                    while len(self._ready) > MAX_SPARES:
                        leftovers.append(self._ready.popitem(last=False)[1])
                    spare = None
                self._lock.notify_all()
            for leftover in [*leftovers, *([spare] if spare is not None else [])]:
                leftover.discard()
            # nothing of this request stays referenced while waiting (it holds its sandbox object,
            # which must be free to go away and take its spares along)
            del key, make, spare, leftovers

    def close(self) -> None:
        with self._lock:
            self._closed = True
            old = list(self._ready.values())
            self._ready.clear()
            self._wanted.clear()
            self._lock.notify_all()
        for spare in old:
            spare.discard()

    def join(self) -> None:
        """After :meth:`close`: wait until the maker thread has ended (it finishes the spare it is
        making, if any, and discards it)."""
        worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join()


def _memfd(data: bytes, fds: list[int]) -> int:
    fd = os.memfd_create("tooldir", os.MFD_CLOEXEC)  # pass_fds hands it to bwrap alone
    fds.append(fd)
    _write_all(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def seccomp_args(
    fds: list[int], policy: SandboxPolicy, *, network: bool, deny_shared_memory: bool, tool: str = ""
) -> list[str]:
    """``--seccomp FD`` with this machine's filter. Where none is tabulated the run is refused
    (``sandbox-unavailable``) unless the policy sets ``sandbox.unsafe_allow_no_seccomp`` (logged)."""
    program = build_filter(network=network, deny_shared_memory=deny_shared_memory)
    if program is None:
        if not policy.unsafe_allow_no_seccomp:
            raise SandboxError(no_seccomp_problem(), code=CallErrorCode.SANDBOX_UNAVAILABLE)
        log.warning(
            "running %s WITHOUT a seccomp filter on %s (policy sandbox.unsafe_allow_no_seccomp = true)",
            tool or "a tool",
            platform.machine(),
        )
        return []
    return ["--seccomp", str(_memfd(program, fds))]


def no_seccomp_problem() -> str:
    return (
        f"no seccomp filter is tabulated for {platform.machine()} (only x86-64 and aarch64): without it "
        "any socket family (AF_VSOCK) and keyring call is open; set sandbox.unsafe_allow_no_seccomp = true "
        "to run without one"
    )


def masked_proc_args(fds: list[int]) -> list[str]:
    """Empty read-only files over /proc/keys and /proc/key-users: the user namespace keeps the
    caller's uid for the kernel, and these list the keys (and key counts) that uid can view."""
    args: list[str] = []
    for path in MASKED_PROC:
        if os.path.exists(path):
            args += ["--perms", "0444", "--ro-bind-data", str(_memfd(b"", fds)), path]
    return args


def package_args(record: ToolRecord, contents: list[bytes], fds: list[int]) -> list[str]:
    """bwrap options that recreate the verified package at /tool from memory: each file's checked
    bytes go through a memfd into the sandbox's own read-only root, so no host path of the package
    is ever bound (and nothing swapped on disk can be seen)."""
    args = ["--perms", "0555", "--dir", TOOL_DIR]
    made = {TOOL_DIR}
    for f, data in zip(record.files, contents, strict=True):
        parts = f.path.split("/")
        for i in range(1, len(parts)):
            folder = f"{TOOL_DIR}/{'/'.join(parts[:i])}"
            if folder not in made:
                made.add(folder)
                args += ["--perms", "0555", "--dir", folder]
        fd = _memfd(data, fds)
        args += ["--perms", "0555" if f.executable else "0444", "--ro-bind-data", str(fd), f"{TOOL_DIR}/{f.path}"]
    return args


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


_PROBE_LOCK = threading.Lock()  # one probe at a time: a second caller waits for the first's (cached) answer


def prestart_probe(policy: SandboxPolicy) -> threading.Thread:
    """Run :func:`probe` for ``policy`` on a thread of its own now (e.g. while the roots load), so
    the first run's own probe finds the answer ready (it waits for this one if still running)."""
    thread = threading.Thread(target=probe, args=(policy,), name="tooldir-sandbox-probe", daemon=True)
    thread.start()
    return thread


def probe(policy: SandboxPolicy) -> str | None:
    """None if a sandboxed process can run here with this policy's settings, else why not."""
    with _PROBE_LOCK:
        return _probe_policy(policy)


def _probe_policy(policy: SandboxPolicy) -> str | None:
    if build_filter() is None and not policy.unsafe_allow_no_seccomp:
        return no_seccomp_problem()
    if policy.memory_bound == "cgroup":
        bound = choose_bound(policy)
        if bound.kind == "rlimit+seccomp":
            return f"sandbox.memory_bound = 'cgroup' but no cgroup limit can be had: {bound.why}"
    return _probe(policy.run_as_uid if os.geteuid() == 0 else None, policy.scratch_mb, policy.unsafe_allow_no_seccomp)


@cache
def _probe(uid: int | None, scratch_mb: int, no_seccomp: bool = False) -> str | None:
    policy = SandboxPolicy(run_as_uid=uid or 65534, scratch_mb=scratch_mb, unsafe_allow_no_seccomp=no_seccomp)
    identity = identity_for(policy)
    try:
        args = limits_prefix(policy, identity.effective_uid) + base_args(policy, network=False)
    except SandboxError as exc:
        return exc.message
    true = shutil.which("true", path=TRUSTED_PATH)
    if true is None:
        return "no 'true' binary on the trusted PATH to probe with"
    fds: list[int] = []
    try:
        args += seccomp_args(fds, policy, network=False, deny_shared_memory=True)
        args += masked_proc_args(fds)
        done = subprocess.run(
            [*args, "--remount-ro", "/", "--", os.path.realpath(true)],
            pass_fds=fds,
            capture_output=True,
            timeout=10,
            check=False,
            cwd="/",
            env={},
            user=identity.uid,
            group=identity.gid,
            extra_groups=[] if identity.uid is not None else None,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bubblewrap could not be started: {exc}"
    finally:
        for fd in fds:
            os.close(fd)
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip()[:300]
        return f"bubblewrap does not work here (exit {done.returncode}): {why}"
    return None
