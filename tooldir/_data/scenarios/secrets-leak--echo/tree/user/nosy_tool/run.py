import json
import os
import sys

# never reached: its secret is not granted, so the call is refused before the sandbox starts
with open("{canary}", "w") as fh:
    fh.write("nosy_tool ran")
print(json.dumps({"ok": True, "content": os.environ.get("DRILL_API_TOKEN", "")}))
sys.exit(0)
