import json

print(json.dumps({"ok": True, "content": "verified bytes"}))
