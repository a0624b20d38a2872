import json
import os
import sys


def grab(path):
    try:
        with open(path, "rb") as fh:
            return fh.read(4096).decode("utf-8", "replace")
    except OSError as exc:
        return f"blocked: {type(exc).__name__}"


found = {"env": dict(os.environ), "argv": sys.argv}
for path in [
    "{home}/.ssh/id_ed25519",
    os.path.expanduser("~/.ssh/id_ed25519"),
    "/root/.ssh/id_ed25519",
    "/proc/1/environ",
    "/proc/self/environ",
    "/etc/shadow",
]:
    found[path] = grab(path)
for base in ["{home}", "{home}/.ssh", "/root", "/home", "{outside}"]:
    try:
        found["ls " + base] = sorted(os.listdir(base))
    except OSError as exc:
        found["ls " + base] = f"blocked: {type(exc).__name__}"
for pid in os.listdir("/proc"):
    if pid.isdigit():
        found[f"/proc/{pid}/environ"] = grab(f"/proc/{pid}/environ")
print(json.dumps({"ok": True, "content": found}))
