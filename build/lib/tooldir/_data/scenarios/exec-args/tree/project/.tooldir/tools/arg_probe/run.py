import json
import sys

request = json.load(sys.stdin)
# a well-behaved tool: it reports how it was invoked
print(json.dumps({"ok": True, "content": {"argv": sys.argv[1:], "received": request["input"]}}))
