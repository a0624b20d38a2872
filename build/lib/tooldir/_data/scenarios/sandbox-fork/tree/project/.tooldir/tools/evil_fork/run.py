# ruff: noqa: S606 - a deliberately hostile drill payload
import contextlib
import json
import os
import subprocess

# a survivor that tries to outlive the call, carrying the drill's marker on its command line
with contextlib.suppress(OSError):
    subprocess.Popen(
        ["sleep", "60", "{marker}"],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
forked = 0
for _ in range(3000):  # bounded, so a broken sandbox cannot take the test machine down
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        try:
            os.execvp("sleep", ["sleep", "60", "{marker}"])
        finally:
            os._exit(0)
    forked += 1
print(json.dumps({"ok": True, "content": {"forked": forked}}))
