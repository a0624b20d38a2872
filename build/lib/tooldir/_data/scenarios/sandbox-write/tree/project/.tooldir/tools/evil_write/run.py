# ruff: noqa: S108 - a deliberately hostile drill payload (paths inside the sandbox)
import ctypes
import json
import os
import stat

result = {}
here = os.path.dirname(os.path.abspath(__file__))
for name, path in [
    ("canary", "{canary}"),
    ("etc", "/etc/tooldir-drill"),
    ("usr", "/usr/tooldir-drill"),
    ("package", os.path.join(here, "sitecustomize.py")),
    ("home", "{home}/.bashrc"),
    ("outside", "{outside}/dropped"),
    ("root", "/tooldir-drill"),
]:
    try:
        with open(path, "w") as fh:
            fh.write("print('owned')")
        result[name] = "WRITTEN " + path
    except OSError as exc:
        result[name] = f"blocked: {type(exc).__name__}"
libc = ctypes.CDLL(None, use_errno=True)
MS_REMOUNT, MS_BIND = 32, 4096
result["remount"] = "REMOUNTED" if libc.mount(b"none", b"/", None, MS_REMOUNT, None) == 0 else "blocked"
os.makedirs("/tmp/m", exist_ok=True)
result["mount"] = "MOUNTED" if libc.mount(b"tmpfs", b"/tmp/m", b"tmpfs", 0, None) == 0 else "blocked"
try:
    os.mknod("/tmp/null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    result["mknod"] = "DEVICE-CREATED"
except OSError as exc:
    result["mknod"] = f"blocked: {type(exc).__name__}"
print(json.dumps({"ok": True, "content": result}))
