# ruff: noqa: S108 - a deliberately hostile drill payload (paths inside the sandbox)
import ctypes
import json
import os
import socket

result = {}
with open("/proc/self/status") as fh:
    for line in fh:
        if line.startswith("Cap"):
            key, value = line.split(":", 1)
            result[key] = value.strip()
result["uid"] = os.getuid()
result["euid"] = os.geteuid()
try:
    os.setuid(0)
    result["setuid"] = "BECAME-ROOT" if os.geteuid() == 0 and result["euid"] != 0 else "noop"
except OSError as exc:
    result["setuid"] = f"blocked: {type(exc).__name__}"
open("/tmp/owned", "w").close()
try:
    os.chown("/tmp/owned", 12345, 12345)
    result["chown"] = "CHOWNED"
except OSError as exc:
    result["chown"] = f"blocked: {type(exc).__name__}"
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close()
    result["raw"] = "RAW-SOCKET"
except OSError as exc:
    result["raw"] = f"blocked: {type(exc).__name__}"
libc = ctypes.CDLL(None, use_errno=True)
os.makedirs("/tmp/m", exist_ok=True)
result["mount"] = "MOUNTED" if libc.mount(b"tmpfs", b"/tmp/m", b"tmpfs", 0, None) == 0 else "blocked"
result["sethostname"] = "HOSTNAME-SET" if libc.sethostname(b"owned", 5) == 0 else "blocked"
print(json.dumps({"ok": True, "content": result}))
