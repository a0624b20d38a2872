"""A classic-BPF interpreter for seccomp programs, small enough to trust: it runs a generated filter
on a synthetic ``struct seccomp_data``, so the filter's logic is tested for every arch without a
machine of that arch. It implements exactly what a seccomp program may use (linux/filter.h):
loads of 32-bit words at absolute offsets, immediates, ALU, conditional and unconditional jumps,
and returns; anything else is an error (the kernel's checker would refuse the program)."""

from __future__ import annotations

import struct
from collections.abc import Sequence

BPF_LD, BPF_LDX, BPF_ST, BPF_STX, BPF_ALU, BPF_JMP, BPF_RET, BPF_MISC = range(8)
BPF_W, BPF_ABS, BPF_IMM, BPF_MEM = 0x00, 0x20, 0x00, 0x60
BPF_K, BPF_X, BPF_A = 0x00, 0x08, 0x10
JA, JEQ, JGT, JGE, JSET = 0x00, 0x10, 0x20, 0x30, 0x40
ADD, SUB, MUL, DIV, OR, AND, LSH, RSH, NEG, MOD, XOR = (
    0x00,
    0x10,
    0x20,
    0x30,
    0x40,
    0x50,
    0x60,
    0x70,
    0x80,
    0x90,
    0xA0,
)
MAX_INSNS = 4096
MASK = 0xFFFFFFFF


class BPFError(Exception):
    """The program is not one the kernel would accept or run."""


def decode(program: bytes) -> list[tuple[int, int, int, int]]:
    if len(program) % 8 or not program or len(program) // 8 > MAX_INSNS:
        raise BPFError(f"bad program length {len(program)}")
    return [struct.unpack_from("=HBBI", program, i) for i in range(0, len(program), 8)]


def seccomp_data(nr: int, arch: int, args: Sequence[int] = (), ip: int = 0) -> bytes:
    full = list(args) + [0] * (6 - len(args))
    return struct.pack("=iIQ6Q", nr, arch, ip, *full)


def run(program: bytes, data: bytes) -> int:
    """The filter's return value for one ``seccomp_data``."""
    insns = decode(program)
    a = x = 0
    mem = [0] * 16
    pc = 0
    while True:
        if pc >= len(insns):
            raise BPFError("fell off the end of the program")
        code, jt, jf, k = insns[pc]
        pc += 1
        cls = code & 0x07
        if cls == BPF_RET:
            src = code & 0x18
            if src == BPF_K:
                return k
            if src == BPF_A:
                return a
            raise BPFError(f"bad ret {code:#x}")
        if cls == BPF_LD:
            mode, size = code & 0xE0, code & 0x18
            if mode == BPF_ABS and size == BPF_W:
                if k % 4 or k + 4 > len(data):
                    raise BPFError(f"misaligned or out-of-range load at {k}")
                a = struct.unpack_from("=I", data, k)[0]
            elif mode == BPF_IMM:
                a = k
            elif mode == BPF_MEM:
                a = mem[k]
            else:
                raise BPFError(f"load mode {code:#x} not allowed in seccomp")
        elif cls == BPF_LDX:
            mode = code & 0xE0
            if mode == BPF_IMM:
                x = k
            elif mode == BPF_MEM:
                x = mem[k]
            else:
                raise BPFError(f"ldx mode {code:#x} not allowed in seccomp")
        elif cls == BPF_ST:
            mem[k] = a
        elif cls == BPF_STX:
            mem[k] = x
        elif cls == BPF_ALU:
            op, operand = code & 0xF0, (x if code & BPF_X else k)
            if op in (DIV, MOD) and operand == 0:
                return 0  # the kernel kills on division by zero
            a = _alu(op, a, operand) & MASK
        elif cls == BPF_JMP:
            op, operand = code & 0xF0, (x if code & BPF_X else k)
            if op == JA:
                pc += k
            else:
                taken = {
                    JEQ: a == operand,
                    JGT: a > operand,
                    JGE: a >= operand,
                    JSET: bool(a & operand),
                }.get(op)
                if taken is None:
                    raise BPFError(f"bad jump {code:#x}")
                pc += jt if taken else jf
        elif cls == BPF_MISC:
            if code & 0xF8 == 0x00:  # TAX
                x = a
            else:  # TXA
                a = x
        else:
            raise BPFError(f"bad class {code:#x}")


def _alu(op: int, a: int, b: int) -> int:
    ops = {
        ADD: lambda: a + b,
        SUB: lambda: a - b,
        MUL: lambda: a * b,
        DIV: lambda: a // b,
        MOD: lambda: a % b,
        OR: lambda: a | b,
        AND: lambda: a & b,
        XOR: lambda: a ^ b,
        LSH: lambda: a << (b & 31),
        RSH: lambda: a >> (b & 31),
        NEG: lambda: -a,
    }
    if op not in ops:
        raise BPFError(f"bad alu op {op:#x}")
    return ops[op]()
