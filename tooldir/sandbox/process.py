"""Spawning one sandboxed process: stdin in, capped stdout/stderr out, wall-clock timeout, rlimits,
and an unprivileged uid when started as root. Shared by the bubblewrap and the unsafe backends."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import selectors
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache

from ..codes import CallErrorCode
from ..errors import SandboxError
from ..policy import SandboxPolicy
from .base import RunResult
from .cgroup import RunGroup
from .output import CappedBuffer

_KILL_WAIT_S = 5.0


@dataclass(frozen=True, slots=True)
class Identity:
    """Who the spawned process runs as: ``uid``/``gid`` None keeps the caller's."""

    uid: int | None
    gid: int | None

    @property
    def effective_uid(self) -> int:
        return os.geteuid() if self.uid is None else self.uid


def identity_for(policy: SandboxPolicy) -> Identity:
    """As root, drop to ``policy.run_as_uid``: bubblewrap started by root keeps capabilities and
    RLIMIT_NPROC is not enforced for uid 0. Otherwise run as the caller."""
    if os.geteuid() == 0:
        return Identity(policy.run_as_uid, policy.run_as_uid)
    return Identity(None, None)


def count_tasks(uid: int) -> int:
    """Tasks (threads) the kernel counts against ``uid``'s RLIMIT_NPROC, approximately."""
    total = 0
    try:
        with os.scandir("/proc") as entries:
            for entry in entries:
                if not entry.name.isdigit():
                    continue
                try:
                    if entry.stat(follow_symlinks=False).st_uid != uid:
                        continue
                    total += len(os.listdir(f"/proc/{entry.name}/task"))
                except OSError:
                    continue
    except OSError:
        return 0
    return total


TRUSTED_PATH = "/usr/local/bin:/usr/bin:/bin"


@cache
def find_prlimit() -> str | None:
    found = shutil.which("prlimit", path=TRUSTED_PATH)
    return os.path.realpath(found) if found else None


def rlimit_address_space(policy: SandboxPolicy) -> int:
    """RLIMIT_AS without a cgroup: ``memory_mb`` plus the address-space slack runtimes reserve."""
    return (policy.memory_mb + policy.address_space_slack_mb) * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Limit:
    """One rlimit to set: ``which`` (a ``resource.RLIMIT_*``), its soft and hard values."""

    which: int
    soft: int
    hard: int


_PRLIMIT_NAMES = {
    resource.RLIMIT_NPROC: "nproc",
    resource.RLIMIT_AS: "as",
    resource.RLIMIT_FSIZE: "fsize",
    resource.RLIMIT_CPU: "cpu",
    resource.RLIMIT_CORE: "core",
    resource.RLIMIT_NOFILE: "nofile",
    resource.RLIMIT_MEMLOCK: "memlock",
    resource.RLIMIT_MSGQUEUE: "msgqueue",
}


def run_limits(policy: SandboxPolicy, uid: int, *, extra_fds: int = 0, address_space: int | None = -1) -> list[Limit]:
    """The rlimits of a sandboxed process (see :func:`limits_prefix`), never above this process's
    own hard limits. Counts ``uid``'s tasks now (RLIMIT_NPROC is per user)."""
    nproc = _clamp(resource.RLIMIT_NPROC, count_tasks(uid) + policy.max_processes)
    if address_space == -1:
        address_space = rlimit_address_space(policy)
    if address_space is not None:
        memory = _clamp(resource.RLIMIT_AS, address_space)
    else:
        memory = resource.getrlimit(resource.RLIMIT_AS)[1]  # unlimited unless this process is bounded
    fsize = _clamp(resource.RLIMIT_FSIZE, policy.max_file_mb * 1024 * 1024)
    nofile = _clamp(resource.RLIMIT_NOFILE, 256 + extra_fds)
    cpu_hard = _clamp(resource.RLIMIT_CPU, policy.cpu_s + 1)
    return [
        Limit(resource.RLIMIT_NPROC, nproc, nproc),
        Limit(resource.RLIMIT_AS, memory, memory),
        Limit(resource.RLIMIT_FSIZE, fsize, fsize),
        Limit(resource.RLIMIT_CPU, min(policy.cpu_s, cpu_hard), cpu_hard),
        Limit(resource.RLIMIT_CORE, 0, 0),
        Limit(resource.RLIMIT_NOFILE, nofile, nofile),
        Limit(resource.RLIMIT_MEMLOCK, 0, 0),
        Limit(resource.RLIMIT_MSGQUEUE, 0, 0),
    ]


def limits_prefix(policy: SandboxPolicy, uid: int, *, extra_fds: int = 0, address_space: int | None = -1) -> list[str]:
    """``prlimit ... --`` setting the rlimits for what follows (util-linux ``prlimit`` execs the
    command with them; no ``preexec_fn``, so spawning stays safe with threads).

    ``address_space`` is RLIMIT_AS in bytes; None leaves it unlimited (a cgroup bounds the memory);
    the default is :func:`rlimit_address_space`. POSIX message queues get RLIMIT_MSGQUEUE 0 and
    locked memory RLIMIT_MEMLOCK 0 in every case."""
    prlimit = find_prlimit()
    if prlimit is None:
        raise SandboxError("prlimit (util-linux) is not installed", code=CallErrorCode.SANDBOX_UNAVAILABLE)
    limits = run_limits(policy, uid, extra_fds=extra_fds, address_space=address_space)
    return [prlimit, *(f"--{_PRLIMIT_NAMES[x.which]}={_shown(x.soft)}:{_shown(x.hard)}" for x in limits), "--"]


def _shown(value: int) -> str:
    return "unlimited" if value == resource.RLIM_INFINITY else str(value)


_CAP_SYS_RESOURCE = 24


@cache
def _has_cap_sys_resource() -> bool:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> _CAP_SYS_RESOURCE & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


@cache
def _set_id(path: str) -> bool:
    try:
        return bool(os.stat(path).st_mode & (stat.S_ISUID | stat.S_ISGID))
    except OSError:
        return True  # unknown: take the prlimit binary


@cache
def find_setpriv() -> str | None:
    found = shutil.which("setpriv", path=TRUSTED_PATH)
    return os.path.realpath(found) if found else None


def drop_prefix(identity: Identity) -> tuple[list[str], Identity]:
    """How to start a process as ``identity``: (argv prefix, the uid/gid switch left to Popen).

    util-linux ``setpriv --reuid --regid --clear-groups`` (real, effective and saved ids, no
    supplementary groups: what Popen's ``user``/``group``/``extra_groups=[]`` do) lets Popen use
    vfork -- it cannot once it switches ids itself, and a fork of this process costs milliseconds;
    without setpriv, Popen switches."""
    setpriv = find_setpriv() if identity.uid is not None else None
    if setpriv is None:
        return [], identity
    gid = identity.uid if identity.gid is None else identity.gid
    return [setpriv, f"--reuid={identity.uid}", f"--regid={gid}", "--clear-groups", "--"], Identity(None, None)


def may_limit_running(executable: str, identity: Identity) -> bool:
    """Whether the kernel lets this process set the rlimits of ``executable`` once started as
    ``identity`` (``prlimit(2)``): the same uid and gid all through (not a set-id binary), or
    CAP_SYS_RESOURCE (which root in a container often lacks)."""
    if _set_id(executable):
        return False
    return identity.uid is None or _has_cap_sys_resource()


def set_limits(pid: int, limits: Sequence[Limit]) -> None:
    """Set ``limits`` on the running process ``pid`` (``prlimit(2)``). Raises OSError."""
    for limit in limits:
        resource.prlimit(pid, limit.which, (limit.soft, limit.hard))


def _clamp(which: int, value: int) -> int:
    """Never ask for more than the current hard limit (an unprivileged process cannot raise it)."""
    hard = resource.getrlimit(which)[1]
    return value if hard == resource.RLIM_INFINITY else min(value, hard)


def spawn_and_collect(
    argv: Sequence[str],
    *,
    stdin: bytes,
    env: Mapping[str, str],
    timeout_s: float,
    cap: int,
    policy: SandboxPolicy,
    identity: Identity,
    pass_fds: Sequence[int] = (),
    cwd: str | None = None,
    info_fd: int | None = None,
    close_after_spawn: Sequence[int] = (),
    address_space: int | None = -1,
    cgroup: RunGroup | None = None,
    release_fd: int | None = None,
    wrapper: Sequence[str] = (),
) -> RunResult:
    """Run ``argv`` in its own process group, feed ``stdin``, read both outputs up to ``cap`` bytes
    each. On timeout or an overflowing output the whole group is killed: :func:`launch`, then
    :func:`collect`.

    Raises:
        SandboxError: ``sandbox-failed`` when the process cannot be started.
    """
    launched = launch(
        argv,
        env=env,
        timeout_s=timeout_s,
        policy=policy,
        identity=identity,
        pass_fds=pass_fds,
        cwd=cwd,
        info_fd=info_fd,
        close_after_spawn=close_after_spawn,
        address_space=address_space,
        cgroup=cgroup,
        release_fd=release_fd,
        wrapper=wrapper,
    )
    return collect(launched, stdin=stdin, timeout_s=timeout_s, cap=cap)


@dataclass(slots=True)
class Launched:
    """A started process that has not been fed yet. ``held``: bubblewrap is waiting at its
    ``--block-fd`` (the sandbox's init reported and, with a cgroup, moved in) until :func:`collect`
    releases it -- no tool code has run."""

    proc: subprocess.Popen[bytes]
    started: float
    info_fd: int | None
    info: CappedBuffer
    release_fd: int | None
    held: bool


def launch(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    timeout_s: float,
    policy: SandboxPolicy,
    identity: Identity,
    pass_fds: Sequence[int] = (),
    cwd: str | None = None,
    info_fd: int | None = None,
    close_after_spawn: Sequence[int] = (),
    address_space: int | None = -1,
    cgroup: RunGroup | None = None,
    release_fd: int | None = None,
    wrapper: Sequence[str] = (),
) -> Launched:
    """Start ``argv`` in its own process group, with the rlimits of :func:`limits_prefix`.

    ``info_fd`` is the read end of bubblewrap's ``--info-fd`` pipe: its ``child-pid`` (the sandbox's
    init) is waited for, bounded, so no sandboxed process outlives the call.

    With ``release_fd``, bubblewrap must have been given ``--block-fd`` with its read end: the
    sandbox's init is waited for (and with ``cgroup`` the launcher and the init are moved into it)
    and the process is returned still held there, so the tool never runs outside the cgroup and
    not before :func:`collect`. Setting up may take until ``timeout_s`` from now; past that nothing
    is released (:func:`collect` then kills the group as timed out). ``address_space`` is passed to
    :func:`limits_prefix`; ``wrapper`` (e.g. ``systemd-run --user --scope ... --``) comes first.

    Raises:
        SandboxError: ``sandbox-failed`` when the process cannot be started or moved (it is killed).
    """
    started = time.perf_counter()
    # held and tooldir's own child: the rlimits are set on the held processes with prlimit(2)
    # before the release (one exec fewer); else through the prlimit binary
    direct = release_fd is not None and not wrapper and may_limit_running(argv[0], identity)
    limits: list[Limit] = []
    try:
        if direct:
            limits = run_limits(policy, identity.effective_uid, extra_fds=len(pass_fds), address_space=address_space)
            prefix = []
        else:
            prefix = limits_prefix(policy, identity.effective_uid, extra_fds=len(pass_fds), address_space=address_space)
        drop, switch = drop_prefix(identity)
        proc = subprocess.Popen(
            [*drop, *wrapper, *prefix, *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env),
            cwd=cwd,
            close_fds=True,
            pass_fds=tuple(pass_fds),
            process_group=0,
            user=switch.uid,
            group=switch.gid,
            extra_groups=[] if switch.uid is not None else None,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxError(f"cannot start the sandbox: {exc}", code=CallErrorCode.SANDBOX_FAILED) from None
    finally:
        for fd in close_after_spawn:
            os.close(fd)
    launched = Launched(proc, started, info_fd, CappedBuffer(4096), release_fd, False)
    if release_fd is not None:
        assert info_fd is not None  # noqa: S101 - caller's contract
        try:
            launched.held = _hold(
                proc.pid, cgroup, info_fd=info_fd, info=launched.info, deadline=started + timeout_s, limits=limits
            )
        except BaseException:
            abandon(launched)
            raise
    return launched


def collect(launched: Launched, *, stdin: bytes, timeout_s: float, cap: int, from_now: bool = False) -> RunResult:
    """Release a :func:`launch` ed process, feed it ``stdin``, read both outputs up to ``cap`` bytes
    each; on timeout or an overflowing output kill the whole group. The timeout counts from the
    launch, or (``from_now``: a process launched ahead of its call) from now."""
    proc, info_fd, info = launched.proc, launched.info_fd, launched.info
    started = time.perf_counter() if from_now else launched.started
    out, err = CappedBuffer(cap), CappedBuffer(cap)
    timed_out = False
    deadline = started + timeout_s
    try:
        if launched.held and launched.release_fd is not None:
            with contextlib.suppress(BrokenPipeError):
                os.write(launched.release_fd, b"1")
        timed_out = _pump(proc, stdin, out=out, err=err, deadline=deadline, info_fd=info_fd, info=info)
    finally:
        child = _end(launched, kill_init=timed_out)
    code = proc.returncode
    killed = timed_out or out.truncated or err.truncated
    return RunResult(
        exit_code=None if killed else (code if code is not None and code >= 0 else None),
        signal=-code if code is not None and code < 0 else None,
        stdout=out.value(),
        stderr=err.value(),
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
        timed_out=timed_out,
        duration_ms=(time.perf_counter() - started) * 1000,
        started=info_fd is None or child is not None,
    )


def abandon(launched: Launched) -> None:
    """Kill a launched process that will never be collected, and wait until its sandbox is gone."""
    _end(launched, kill_init=True)


def _end(launched: Launched, *, kill_init: bool) -> int | None:
    """Kill the group if still running, close its pipes, and wait (bounded) for the sandbox's
    init to be gone. Returns the init's pid, if bubblewrap reported one."""
    proc = launched.proc
    if proc.poll() is None:
        _kill_group(proc)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    if launched.info_fd is None:
        return None
    _drain(launched.info_fd, launched.info)
    child = _child_pid(launched.info.value())
    _wait_gone(child, kill=kill_init or proc.returncode is None or proc.returncode < 0)
    return child


def _hold(
    pid: int,
    cgroup: RunGroup | None,
    *,
    info_fd: int,
    info: CappedBuffer,
    deadline: float,
    limits: Sequence[Limit] = (),
) -> bool:
    """Read the sandbox init's pid from bubblewrap's info (it waits at ``--block-fd`` meanwhile,
    before it forks the tool), set ``limits`` on the launcher and the init (the tool inherits them
    from the init, which forks it only once released) and move both into ``cgroup``. False when
    the deadline passed first, or when limits are to be set and bubblewrap reported no init (then
    nothing may be released).

    Raises:
        SandboxError: ``sandbox-failed`` when a process cannot be limited or moved.
    """
    child = None
    while child is None:
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            return False
        ready, _, _ = select.select([info_fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(info_fd, 4096)
        if not chunk:
            break  # bubblewrap ended before reporting: nothing of the tool ran
        info.feed(chunk)
        child = _child_pid(info.value())
    if limits:
        if child is None:
            return False  # never released without its limits (bubblewrap ended anyway)
        try:
            for each in (pid, child):
                set_limits(each, limits)
        except OSError as exc:
            raise SandboxError(f"cannot set the sandbox's rlimits: {exc}", code=CallErrorCode.SANDBOX_FAILED) from None
    if cgroup is None:
        return True
    try:
        cgroup.add(pid)
        if child is not None:
            cgroup.add(child)
    except OSError as exc:
        raise SandboxError(
            f"cannot move the sandbox into its cgroup {cgroup.path}: {exc}", code=CallErrorCode.SANDBOX_FAILED
        ) from None
    return True


def _drain(fd: int, buffer: CappedBuffer) -> None:
    os.set_blocking(fd, False)
    with contextlib.suppress(OSError):
        while chunk := os.read(fd, 4096):
            if not buffer.feed(chunk):
                break


def _child_pid(info: bytes) -> int | None:
    try:
        pid = json.loads(info or b"{}").get("child-pid")
    except (ValueError, AttributeError):
        return None
    return pid if isinstance(pid, int) and pid > 1 else None


def _wait_gone(pid: int | None, *, kill: bool) -> None:
    """Wait (bounded) until the sandbox's init has exited: its pid namespace is then empty."""
    if pid is None:
        return
    if kill:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + _KILL_WAIT_S
    pause = 0.0002
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[-1].split()[0]
        except (OSError, IndexError):
            return
        if state in (b"Z", b"X"):
            return
        time.sleep(pause)
        pause = min(pause * 2, 0.01)


def _pump(
    proc: subprocess.Popen[bytes],
    stdin: bytes,
    *,
    out: CappedBuffer,
    err: CappedBuffer,
    deadline: float,
    info_fd: int | None,
    info: CappedBuffer,
) -> bool:
    """Move bytes until both outputs close and the process exits. Returns True on timeout."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None  # noqa: S101
    sel = selectors.DefaultSelector()
    pending = memoryview(stdin)
    os.set_blocking(proc.stdin.fileno(), False)
    if pending:
        sel.register(proc.stdin, selectors.EVENT_WRITE)
    else:
        proc.stdin.close()
    sel.register(proc.stdout, selectors.EVENT_READ, out)
    sel.register(proc.stderr, selectors.EVENT_READ, err)
    if info_fd is not None:
        sel.register(info_fd, selectors.EVENT_READ, info)
    readers = 2
    try:
        while readers:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                _kill_group(proc)
                return True
            for key, _ in sel.select(remaining):
                if key.fileobj is proc.stdin:
                    try:
                        sent = os.write(proc.stdin.fileno(), pending[:65536])
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        sent = len(pending)
                    pending = pending[sent:]
                    if not pending:
                        sel.unregister(proc.stdin)
                        proc.stdin.close()
                    continue
                fd = key.fd
                chunk = os.read(fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    readers -= fd != info_fd
                    continue
                if key.data is info:
                    info.feed(chunk)
                    continue
                if not key.data.feed(chunk):
                    _kill_group(proc)
                    return False
        try:
            proc.wait(timeout=max(0.0, deadline - time.perf_counter()))
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return True
        return False
    finally:
        sel.close()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group; the sandbox's pid namespace dies with its init."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):  # a process stuck in D state
        proc.wait(timeout=_KILL_WAIT_S)
