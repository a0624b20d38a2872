"""The seccomp filter (classic BPF) that bubblewrap loads with ``--seccomp FD``, written by hand for
x86-64 and aarch64.

Namespaces and the missing capabilities already stop most of these calls; the filter is a second
wall for the ones that work *inside* a sandbox with the same uid, and the only wall for a few that
namespaces do not cover:

- **socket families**: ``socket``/``socketpair`` succeed only for ``AF_UNIX``, plus ``AF_INET`` and
  ``AF_INET6`` when the run was granted the network; every other family (``AF_VSOCK``, which no
  network namespace isolates, ``AF_NETLINK``, ``AF_PACKET``, ``AF_ALG``, ...) fails with
  ``EAFNOSUPPORT``. ``io_uring`` (which can create sockets without ``socket()``) is denied. There is
  no ``socketcall`` on either native ABI: the i386 / arm32 ABIs are refused by the arch check;
- ``ptrace``, ``process_vm_*``, ``pidfd_getfd``, keyrings (``add_key``, ``request_key``, ``keyctl``),
  eBPF, ``perf_event_open``, ``userfaultfd``, the mount API, modules, kexec, reboot, swap;
- the terminal-injection ioctls ``TIOCSTI`` and ``TIOCLINUX``;
- with ``deny_shared_memory`` (when no cgroup bounds the sandbox's memory): ``memfd_create``,
  ``memfd_secret``, SysV ``shmget`` and POSIX ``mq_open``, whose pages ``RLIMIT_AS`` does not count.

Layout: check ``seccomp_data.arch`` (a foreign ABI kills the process), on x86-64 refuse x32 call
numbers, then one ``jeq`` per denied number, then the argument checks, then allow. Blocked calls
fail with ``EPERM`` (socket families with ``EAFNOSUPPORT``). Other architectures get no filter
(``None``) and the sandbox refuses to run there unless the policy opts out.
"""

from __future__ import annotations

import errno
import platform
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

# linux/filter.h, linux/seccomp.h, linux/audit.h
BPF_LD_W_ABS = 0x20
BPF_JEQ_K = 0x15
BPF_JGE_K = 0x35
BPF_RET_K = 0x06
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_AARCH64 = 0xC00000B7
X32_SYSCALL_BIT = 0x40000000
TIOCSTI = 0x5412
TIOCLINUX = 0x541C
AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10

# offsets into struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6];}; both arches are
# little-endian, so the low 32 bits of args[i] are at 16 + 8 * i
_NR, _ARCH, _ARG0_LO, _ARG1_LO = 0, 4, 16, 24

# the calls every run is denied, by name (numbers per arch below)
ALWAYS_DENIED = (
    "ptrace",
    "syslog",
    "personality",
    "pivot_root",
    "acct",
    "mount",
    "umount2",
    "swapon",
    "swapoff",
    "reboot",
    "iopl",
    "ioperm",
    "init_module",
    "delete_module",
    "quotactl",
    "kexec_load",
    "add_key",
    "request_key",
    "keyctl",
    "perf_event_open",
    "name_to_handle_at",
    "open_by_handle_at",
    "setns",
    "process_vm_readv",
    "process_vm_writev",
    "finit_module",
    "kexec_file_load",
    "bpf",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "pidfd_getfd",
    "mount_setattr",
)
# memory a process can hold outside RLIMIT_AS: denied when no cgroup bounds the sandbox
SHARED_MEMORY = ("memfd_create", "memfd_secret", "shmget", "mq_open")


@dataclass(frozen=True, slots=True, eq=False)  # hashed by identity: one table per arch
class Arch:
    name: str
    audit_arch: int
    syscalls: Mapping[str, int]  # a name missing here does not exist on this arch
    x32: bool = False  # x86-64: refuse call numbers with the x32 bit


# Calls added since Linux 5.1 have one number on every architecture (the unified table).
_UNIFIED = {
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "pidfd_getfd": 438,
    "mount_setattr": 442,
    "memfd_secret": 447,
}

# arch/x86/entry/syscalls/syscall_64.tbl
X86_64 = Arch(
    "x86_64",
    AUDIT_ARCH_X86_64,
    {
        "ioctl": 16,
        "shmget": 29,
        "socket": 41,
        "socketpair": 53,
        "ptrace": 101,
        "syslog": 103,
        "personality": 135,
        "pivot_root": 155,
        "acct": 163,
        "mount": 165,
        "umount2": 166,
        "swapon": 167,
        "swapoff": 168,
        "reboot": 169,
        "iopl": 172,
        "ioperm": 173,
        "init_module": 175,
        "delete_module": 176,
        "quotactl": 179,
        "mq_open": 240,
        "kexec_load": 246,
        "add_key": 248,
        "request_key": 249,
        "keyctl": 250,
        "perf_event_open": 298,
        "name_to_handle_at": 303,
        "open_by_handle_at": 304,
        "setns": 308,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "finit_module": 313,
        "memfd_create": 319,
        "kexec_file_load": 320,
        "bpf": 321,
        "userfaultfd": 323,
        **_UNIFIED,
    },
    x32=True,
)

# include/uapi/asm-generic/unistd.h (aarch64 has no iopl/ioperm and no socketcall)
AARCH64 = Arch(
    "aarch64",
    AUDIT_ARCH_AARCH64,
    {
        "ioctl": 29,
        "umount2": 39,
        "mount": 40,
        "pivot_root": 41,
        "quotactl": 60,
        "acct": 89,
        "personality": 92,
        "kexec_load": 104,
        "init_module": 105,
        "delete_module": 106,
        "syslog": 116,
        "ptrace": 117,
        "reboot": 142,
        "mq_open": 180,
        "shmget": 194,
        "socket": 198,
        "socketpair": 199,
        "add_key": 217,
        "request_key": 218,
        "keyctl": 219,
        "swapon": 224,
        "swapoff": 225,
        "perf_event_open": 241,
        "name_to_handle_at": 264,
        "open_by_handle_at": 265,
        "setns": 268,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "finit_module": 273,
        "memfd_create": 279,
        "bpf": 280,
        "userfaultfd": 282,
        "kexec_file_load": 294,
        **_UNIFIED,
    },
)

ARCHES: Mapping[str, Arch] = {"x86_64": X86_64, "amd64": X86_64, "aarch64": AARCH64, "arm64": AARCH64}


def machine_arch() -> Arch | None:
    """This machine's arch table, or None where no filter is tabulated."""
    return ARCHES.get(platform.machine().lower())


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


class _Program:
    """A tiny assembler: instructions with symbolic jump targets, resolved to relative offsets."""

    def __init__(self) -> None:
        self.code: list[tuple[int, str | None, str | None, int]] = []
        self.labels: dict[str, int] = {}

    def op(self, code: int, k: int, jt: str | None = None, jf: str | None = None) -> None:
        self.code.append((code, jt, jf, k))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def assemble(self) -> bytes:
        out = []
        for i, (code, jt, jf, k) in enumerate(self.code):
            offsets = []
            for target in (jt, jf):
                off = 0 if target is None else self.labels[target] - i - 1
                if not 0 <= off <= 255:
                    raise ValueError(f"seccomp jump from {i} to {target} out of range ({off})")
                offsets.append(off)
            out.append(_insn(code, offsets[0], offsets[1], k))
        return b"".join(out)


def denied_calls(arch: Arch, *, deny_shared_memory: bool) -> dict[str, int]:
    """Name -> number of every call the filter refuses with EPERM on ``arch``."""
    names = ALWAYS_DENIED + (SHARED_MEMORY if deny_shared_memory else ())
    return {n: arch.syscalls[n] for n in names if n in arch.syscalls}


def socket_families(*, network: bool) -> tuple[int, ...]:
    return (AF_UNIX, AF_INET, AF_INET6) if network else (AF_UNIX,)


def build_filter(arch: Arch | None = None, *, network: bool = False, deny_shared_memory: bool = True) -> bytes | None:
    """The compiled filter for ``arch`` (default: this machine's), or None where none is tabulated."""
    arch = arch or machine_arch()
    return None if arch is None else _build(arch, network, deny_shared_memory)


@cache
def _build(arch: Arch, network: bool, deny_shared_memory: bool) -> bytes:
    eperm = SECCOMP_RET_ERRNO | errno.EPERM
    p = _Program()
    p.op(BPF_LD_W_ABS, _ARCH)
    p.op(BPF_JEQ_K, arch.audit_arch, jf="kill")  # i386, x32-via-other-arch, arm32: a foreign ABI
    p.op(BPF_LD_W_ABS, _NR)
    if arch.x32:
        p.op(BPF_JGE_K, X32_SYSCALL_BIT, jt="deny")
    for nr in sorted(set(denied_calls(arch, deny_shared_memory=deny_shared_memory).values())):
        p.op(BPF_JEQ_K, nr, jt="deny")
    p.op(BPF_JEQ_K, arch.syscalls["socket"], jt="family")
    p.op(BPF_JEQ_K, arch.syscalls["socketpair"], jt="family")
    p.op(BPF_JEQ_K, arch.syscalls["ioctl"], jt="ioctl", jf="allow")
    p.label("family")  # the domain: int, the low 32 bits of args[0]
    p.op(BPF_LD_W_ABS, _ARG0_LO)
    for family in socket_families(network=network):
        p.op(BPF_JEQ_K, family, jt="allow")
    p.op(BPF_RET_K, SECCOMP_RET_ERRNO | errno.EAFNOSUPPORT)
    p.label("ioctl")  # the request: unsigned int, the low 32 bits of args[1]
    p.op(BPF_LD_W_ABS, _ARG1_LO)
    p.op(BPF_JEQ_K, TIOCSTI, jt="deny")
    p.op(BPF_JEQ_K, TIOCLINUX, jt="deny")
    p.label("allow")
    p.op(BPF_RET_K, SECCOMP_RET_ALLOW)
    p.label("deny")
    p.op(BPF_RET_K, eperm)
    p.label("kill")
    p.op(BPF_RET_K, SECCOMP_RET_KILL_PROCESS)
    return p.assemble()
