import json
import sys

request = json.load(sys.stdin)
print(json.dumps({"ok": True, "content": "depth ok " + str(len(json.dumps(request["input"])))}))
