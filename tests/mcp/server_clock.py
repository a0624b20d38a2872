"""Waiting on a ``tooldir serve`` process by the work it does, not by the wall clock.

A server that has not answered after ANSWER_CPU_S of its *own* CPU time is stuck, not slow; the
wall clock is only a backstop (WALL_BACKSTOP_S), because a 2-core machine running other tests and
busy loops may give the server a tenth of a core, and a test bound by wall time then fails for
the machine's sake (issue 22). Every failure says what was seen: the wall time, the server's CPU
time, its state and exit status, and what it had sent.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from pathlib import Path
from typing import Any

#: CPU seconds of the server's own (and its reaped children's) without the awaited answer: stuck
ANSWER_CPU_S = 20.0
#: wall seconds after which a wait fails however little CPU the server was given
WALL_BACKSTOP_S = 10 * ANSWER_CPU_S
SLICE_S = 0.25  # how often the CPU time is looked at while waiting
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """CPU time of process ``pid`` and its reaped children (utime, stime, cutime, cstime); 0 once
    the process is gone from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / _CLOCK_TICKS


def process_state(pid: int) -> str:
    """The kernel's one-letter state of ``pid`` and where it sleeps (``S futex_do_wait``)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        wchan = Path(f"/proc/{pid}/wchan").read_text().strip()
    except OSError:
        return "gone"
    return f"{state} {wchan}".strip()


class Budget:
    """One wait: over once the process has used ANSWER_CPU_S more CPU time than at the start, or
    WALL_BACKSTOP_S have passed."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.started = time.monotonic()
        self.cpu_at_start = cpu_seconds(pid)

    def spent(self) -> bool:
        used = cpu_seconds(self.pid) - self.cpu_at_start
        return used >= ANSWER_CPU_S or time.monotonic() - self.started >= WALL_BACKSTOP_S

    def seen(self, what: str) -> str:
        used = max(0.0, cpu_seconds(self.pid) - self.cpu_at_start)
        return (
            f"{what} after {time.monotonic() - self.started:.1f} s wall and {used:.1f} s of the server's CPU time "
            f"(server state: {process_state(self.pid)})"
        )


def read_line(proc: subprocess.Popen[bytes], buffer: bytearray, what: str = "message") -> bytes:
    """The next line ``proc`` writes to stdout (bytes read past it stay in ``buffer``)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    budget = Budget(proc.pid)
    while b"\n" not in buffer:
        if budget.spent():
            raise AssertionError(budget.seen(f"no {what}") + f", exit status {proc.poll()}")
        ready, _, _ = select.select([fd], [], [], SLICE_S)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            raise AssertionError(f"tooldir serve closed stdout before the {what}; it had sent {bytes(buffer)!r}")
        buffer += chunk
    end = buffer.index(b"\n") + 1
    line = bytes(buffer[:end])
    del buffer[:end]
    return line


def read_until_id(proc: subprocess.Popen[bytes], wanted: Any, buffer: bytearray | None = None) -> list[bytes]:
    """Raw stdout lines of ``proc`` up to and including the response with id ``wanted``. Bytes
    after that line stay in ``buffer`` (when given) for the next read."""
    pending = buffer if buffer is not None else bytearray()
    lines: list[bytes] = []
    while True:
        line = read_line(proc, pending, f"response with id {wanted!r} (got {len(lines)} other lines)")
        lines.append(line)
        if line.strip() and json.loads(line).get("id") == wanted:
            return lines


def wait_exit(proc: subprocess.Popen[bytes]) -> int:
    """Wait for ``proc`` to end (and reap it); fails, killing it, if it is stuck."""
    budget = Budget(proc.pid)
    while proc.poll() is None:
        if budget.spent():
            seen = budget.seen("tooldir serve did not exit")
            proc.kill()
            proc.wait()
            raise AssertionError(seen)
        try:
            proc.wait(timeout=SLICE_S)
        except subprocess.TimeoutExpired:
            continue
    return proc.returncode


def communicate(proc: subprocess.Popen[bytes], data: bytes | None = None) -> tuple[bytes, bytes]:
    """``proc.communicate(data)``: sends ``data`` (then closes stdin: the client hangs up), reads
    stdout and stderr to their end and reaps ``proc``; fails, killing it, if it is stuck."""
    budget = Budget(proc.pid)
    pending = data
    while True:
        try:
            out, err = proc.communicate(pending, timeout=SLICE_S)
            return out or b"", err or b""
        except subprocess.TimeoutExpired:
            pending = None  # sent already: a retried communicate() keeps what it read and wrote
            if budget.spent():
                seen = budget.seen("tooldir serve did not exit")
                proc.kill()
                proc.communicate()
                raise AssertionError(seen) from None


def run(argv: list[str], data: bytes = b"", **popen: Any) -> subprocess.CompletedProcess[bytes]:
    """``subprocess.run(argv, input=data, capture_output=True, ...)``, bounded as :func:`communicate` is."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)
    out, err = communicate(proc, data)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)
