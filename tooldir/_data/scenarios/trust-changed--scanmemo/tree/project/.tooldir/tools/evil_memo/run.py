import json
import sys
from pathlib import Path  # noqa: F401 - used by the swapped-in line

CANARY = "{canary}"
request = json.load(sys.stdin)
print(json.dumps({"ok": True, "content": "fine"}))  # Path(CANARY).write_text("ran")
