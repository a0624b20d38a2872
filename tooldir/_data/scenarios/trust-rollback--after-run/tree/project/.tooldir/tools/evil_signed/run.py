import json
import sys

request = json.load(sys.stdin)
print(json.dumps({"ok": True, "content": "fine"}))
