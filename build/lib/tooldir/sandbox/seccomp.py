"""A small seccomp filter (classic BPF) that bubblewrap loads with ``--seccomp FD``.

Namespaces and the missing capabilities already stop most of these calls; the filter is a second
wall for the ones that work *inside* a sandbox with the same uid: ``ptrace`` (e.g. of the
sandbox's init, or to inject into a sibling), ``process_vm_*``, ``pidfd_getfd``, keyrings, eBPF,
``perf_event_open``, ``userfaultfd``, the mount API, and the terminal-injection ioctls ``TIOCSTI``
and ``TIOCLINUX``. Blocked calls fail with ``EPERM``. Other architectures than x86-64 get no
filter (``None``): their syscall numbers are not tabulated here.
"""

from __future__ import annotations

import errno
import platform
import struct
from functools import cache

# linux/filter.h, linux/seccomp.h, linux/audit.h
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06
_SECCOMP_RET_ALLOW = 0x7FFF0000
_SECCOMP_RET_ERRNO = 0x00050000
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_SYSCALL_BIT = 0x40000000
_TIOCSTI = 0x5412
_TIOCLINUX = 0x541C

X86_64_DENIED = {
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
    "kexec_file_load": 320,
    "bpf": 321,
    "userfaultfd": 323,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "pidfd_getfd": 438,
    "mount_setattr": 442,
}
_X86_64_IOCTL = 16


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


@cache
def build_filter() -> bytes | None:
    """The compiled filter for this machine, or None where none is tabulated."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return None
    deny = _SECCOMP_RET_ERRNO | errno.EPERM
    denied = sorted(X86_64_DENIED.values())
    prog: list[bytes] = [
        _insn(_LD_W_ABS, 0, 0, 4),  # A = arch
        _insn(_JEQ_K, 1, 0, _AUDIT_ARCH_X86_64),
        _insn(_RET_K, 0, 0, deny),  # i386 / foreign ABI: every call fails
        _insn(_LD_W_ABS, 0, 0, 0),  # A = syscall nr
        _insn(_JGE_K, 0, 1, _X32_SYSCALL_BIT),
        _insn(_RET_K, 0, 0, deny),  # x32 ABI
    ]
    # one "jeq nr -> deny" per denied call: jump over the remaining checks to the shared deny
    # (placed after the ioctl block), else fall through
    n = len(denied)
    for i, nr in enumerate(denied):
        remaining = n - i - 1
        prog.append(_insn(_JEQ_K, remaining + 6, 0, nr))  # +6: skip the ioctl block and allow
    # ioctl: deny TIOCSTI / TIOCLINUX (request = low 32 bits of args[1], at offset 24)
    prog += [
        _insn(_JEQ_K, 0, 4, _X86_64_IOCTL),
        _insn(_LD_W_ABS, 0, 0, 24),
        _insn(_JEQ_K, 3, 0, _TIOCSTI),
        _insn(_JEQ_K, 2, 0, _TIOCLINUX),
        _insn(_RET_K, 0, 0, _SECCOMP_RET_ALLOW),
        _insn(_RET_K, 0, 0, _SECCOMP_RET_ALLOW),
        _insn(_RET_K, 0, 0, deny),
    ]
    return b"".join(prog)
