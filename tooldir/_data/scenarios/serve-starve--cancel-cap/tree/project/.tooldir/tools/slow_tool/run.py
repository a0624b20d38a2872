# ruff: noqa: S606 - a drill payload: a long run that carries the drill's marker on its command line
import json
import os
import sys

request = json.load(sys.stdin)
if request["input"].get("wait"):
    # one process per run from here on, killed at the tool's timeout
    os.execvp("python3", ["python3", "-c", "import time; time.sleep(60)", "{marker}"])
print(json.dumps({"ok": True, "content": "quick answer"}))
