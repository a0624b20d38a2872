"""The hand-written seccomp filter, run in a small BPF interpreter on synthetic seccomp_data for
each arch it is built for (no machine of that arch needed)."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import bpf_interp
import pytest

from tooldir.sandbox import seccomp
from tooldir.sandbox.seccomp import AARCH64, X86_64, Arch

ALLOW = seccomp.SECCOMP_RET_ALLOW
EPERM = seccomp.SECCOMP_RET_ERRNO | errno.EPERM
EAFNOSUPPORT = seccomp.SECCOMP_RET_ERRNO | errno.EAFNOSUPPORT
KILL = seccomp.SECCOMP_RET_KILL_PROCESS
AF_VSOCK, AF_NETLINK, AF_PACKET, AF_ALG, AF_BLUETOOTH = 40, 16, 17, 38, 31
AUDIT_ARCH_I386, AUDIT_ARCH_ARM = 0x40000003, 0x40000028
ARCHES = [X86_64, AARCH64]


def verdict(arch: Arch, name: str, *args: int, network: bool = False, shm: bool = True) -> int:
    program = seccomp.build_filter(arch, network=network, deny_shared_memory=shm)
    assert program is not None
    return bpf_interp.run(program, bpf_interp.seccomp_data(arch.syscalls[name], arch.audit_arch, args))


@pytest.mark.parametrize("arch", ARCHES, ids=lambda a: a.name)
@pytest.mark.parametrize("call", ["socket", "socketpair"])
def test_only_unix_sockets_are_allowed_without_network(arch: Arch, call: str) -> None:
    assert verdict(arch, call, seccomp.AF_UNIX, 1) == ALLOW
    for family in (AF_VSOCK, AF_NETLINK, AF_PACKET, AF_ALG, AF_BLUETOOTH, seccomp.AF_INET, seccomp.AF_INET6, 0, 255):
        assert verdict(arch, call, family, 1) == EAFNOSUPPORT, family


@pytest.mark.parametrize("arch", ARCHES, ids=lambda a: a.name)
def test_network_adds_inet_and_inet6_but_never_vsock(arch: Arch) -> None:
    assert verdict(arch, "socket", seccomp.AF_INET, 1, network=True) == ALLOW
    assert verdict(arch, "socket", seccomp.AF_INET6, 2, network=True) == ALLOW
    assert verdict(arch, "socket", seccomp.AF_UNIX, 1, network=True) == ALLOW
    assert verdict(arch, "socket", AF_VSOCK, 1, network=True) == EAFNOSUPPORT
    assert verdict(arch, "socket", AF_NETLINK, 3, network=True) == EAFNOSUPPORT


@pytest.mark.parametrize("arch", ARCHES, ids=lambda a: a.name)
def test_the_family_is_the_low_32_bits_of_the_first_argument(arch: Arch) -> None:
    # the kernel reads an int: garbage in the high half must neither smuggle AF_VSOCK nor block AF_UNIX
    assert verdict(arch, "socket", (1 << 32) | AF_VSOCK, 1) == EAFNOSUPPORT
    assert verdict(arch, "socket", (7 << 32) | seccomp.AF_UNIX, 1) == ALLOW


@pytest.mark.parametrize("arch", ARCHES, ids=lambda a: a.name)
def test_keyrings_tracing_io_uring_and_mounts_are_denied(arch: Arch) -> None:
    for name in ("keyctl", "add_key", "request_key", "ptrace", "io_uring_setup", "mount", "bpf", "pidfd_getfd"):
        assert verdict(arch, name) == EPERM, name


@pytest.mark.parametrize("arch", ARCHES, ids=lambda a: a.name)
def test_shared_memory_calls_are_denied_only_when_asked(arch: Arch) -> None:
    for name in ("memfd_create", "memfd_secret", "shmget", "mq_open"):
        assert verdict(arch, name, shm=True) == EPERM, name
        assert verdict(arch, name, shm=False) == ALLOW, name


@pytest.mark.parametrize("arch", ARCHES, ids=lambda a: a.name)
def test_terminal_injection_ioctls_are_denied_and_other_ioctls_allowed(arch: Arch) -> None:
    assert verdict(arch, "ioctl", 0, seccomp.TIOCSTI) == EPERM
    assert verdict(arch, "ioctl", 0, seccomp.TIOCLINUX) == EPERM
    assert verdict(arch, "ioctl", 0, (1 << 32) | seccomp.TIOCSTI) == EPERM
    assert verdict(arch, "ioctl", 0, 0x5401) == ALLOW  # TCGETS


@pytest.mark.parametrize("arch", ARCHES, ids=lambda a: a.name)
def test_ordinary_calls_are_allowed(arch: Arch) -> None:
    program = seccomp.build_filter(arch)
    assert program is not None
    denied = set(seccomp.denied_calls(arch, deny_shared_memory=True).values())
    special = denied | {arch.syscalls[n] for n in ("socket", "socketpair", "ioctl")}
    for nr in range(460):
        if nr not in special:
            assert bpf_interp.run(program, bpf_interp.seccomp_data(nr, arch.audit_arch)) == ALLOW, nr


def test_a_foreign_abi_is_killed() -> None:
    x86 = seccomp.build_filter(X86_64)
    arm = seccomp.build_filter(AARCH64)
    assert x86 is not None and arm is not None
    assert bpf_interp.run(x86, bpf_interp.seccomp_data(1, AUDIT_ARCH_I386)) == KILL  # int 0x80 from x86-64
    assert bpf_interp.run(x86, bpf_interp.seccomp_data(41, seccomp.AUDIT_ARCH_AARCH64)) == KILL
    assert bpf_interp.run(arm, bpf_interp.seccomp_data(198, AUDIT_ARCH_ARM)) == KILL  # arm32 compat
    assert bpf_interp.run(arm, bpf_interp.seccomp_data(198, seccomp.AUDIT_ARCH_X86_64)) == KILL


def test_x32_call_numbers_are_denied_on_x86_64() -> None:
    program = seccomp.build_filter(X86_64)
    assert program is not None
    for nr in (0, 41, 0x200 + 41):  # read, socket, x32's own socket-family range
        data = bpf_interp.seccomp_data(seccomp.X32_SYSCALL_BIT | nr, seccomp.AUDIT_ARCH_X86_64, (AF_VSOCK,))
        assert bpf_interp.run(program, data) == EPERM


def test_aarch64_has_no_socketcall_and_no_x86_only_calls() -> None:
    assert "socketcall" not in AARCH64.syscalls and "socketcall" not in X86_64.syscalls
    assert "iopl" not in AARCH64.syscalls
    assert len(set(AARCH64.syscalls.values())) == len(AARCH64.syscalls)
    assert len(set(X86_64.syscalls.values())) == len(X86_64.syscalls)


def test_every_denied_name_exists_on_some_arch() -> None:
    for name in seccomp.ALWAYS_DENIED + seccomp.SHARED_MEMORY:
        assert any(name in arch.syscalls for arch in ARCHES), name


def test_an_untabulated_arch_gets_no_filter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(seccomp.platform, "machine", lambda: "riscv64")
    assert seccomp.machine_arch() is None
    assert seccomp.build_filter(None, network=False, deny_shared_memory=True) is None


def test_the_interpreter_rejects_a_program_that_falls_off_the_end() -> None:
    program = seccomp._insn(seccomp.BPF_LD_W_ABS, 0, 0, 0)
    with pytest.raises(bpf_interp.BPFError):
        bpf_interp.run(program, bpf_interp.seccomp_data(0, 0))


HEADERS = {
    "x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
    "aarch64": Path("/usr/include/asm-generic/unistd.h"),
}


@pytest.mark.parametrize("arch", ARCHES, ids=lambda a: a.name)
def test_the_syscall_tables_match_the_kernel_headers(arch: Arch) -> None:
    header = HEADERS[arch.name]
    if not header.exists():
        missing = f"{header} (linux-libc-dev) is not installed: nothing to cross-check against"
        if os.environ.get("TOOLDIR_REQUIRE_SANDBOX") == "1":  # CI and scripts/test install it
            pytest.fail(missing)
        pytest.skip(missing)
    numbers = {m[1]: int(m[2]) for m in re.finditer(r"#define __NR(?:3264)?_(\w+)\s+(\d+)", header.read_text())}
    assert {name: numbers.get(name) for name in arch.syscalls} == dict(arch.syscalls)
    assert "socketcall" not in numbers  # neither native ABI has it: socket() is the only way in
