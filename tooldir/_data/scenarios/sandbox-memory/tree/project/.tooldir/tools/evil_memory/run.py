# ruff: noqa: S108 - a deliberately hostile drill payload: it fills the sandbox's own tmpfs
import contextlib
import ctypes
import json
import os
import subprocess
import sys

json.load(sys.stdin)
MB = 1 << 20
GOAL_MB = 1536  # far beyond the policy's memory_mb = 128
report = {}
with contextlib.suppress(OSError), open("{canary}", "w") as fh:
    fh.write("ran: sandbox:memory")


def outcome(name, held_mb):
    report[name] = f"HOARDED {held_mb} MiB" if held_mb >= GOAL_MB else f"stopped at {held_mb} MiB"


def fill(fd, limit_mb):
    held = 0
    chunk = b"m" * MB
    try:
        while held < limit_mb:
            os.write(fd, chunk)
            held += 1
    except OSError:
        pass
    return held


held = 0
try:
    while held < GOAL_MB:
        fd = os.memfd_create("hoard")
        got = fill(fd, 64)
        held += got
        if got < 64:
            break
except OSError as exc:
    report["memfd-error"] = exc.errno
outcome("memfd", held)

libc = ctypes.CDLL(None, use_errno=True)
shm = libc.shmget(0, GOAL_MB * MB, 0o1000 | 0o600)
report["shmget"] = "HOARDED a segment" if shm >= 0 else f"refused errno {ctypes.get_errno()}"
for folder in ("/dev/shm", "/tmp"):
    try:
        fd = os.open(f"{folder}/hoard", os.O_CREAT | os.O_WRONLY, 0o600)
        outcome(folder, fill(fd, GOAL_MB))
    except OSError as exc:
        report[folder] = f"refused errno {exc.errno}"
try:
    outcome("anonymous", len(bytearray(GOAL_MB * MB)) // MB)
except MemoryError:
    report["anonymous"] = "refused: MemoryError"
# a child that tries to keep memory after the call, marked for the drill's process check
holder = "import os, time; fd = os.memfd_create('keep'); time.sleep(60)  # {marker}"
with contextlib.suppress(OSError):
    subprocess.Popen([sys.executable, "-c", holder], start_new_session=True, stdin=subprocess.DEVNULL)
holder = "import time; b = bytearray(64 << 20); time.sleep(60)  # {marker}"
with contextlib.suppress(OSError):
    subprocess.Popen([sys.executable, "-c", holder], start_new_session=True, stdin=subprocess.DEVNULL)
print(json.dumps({"ok": True, "content": report}))
