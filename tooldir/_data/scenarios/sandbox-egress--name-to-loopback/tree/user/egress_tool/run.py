import json
import sys
import urllib.request

request = json.load(sys.stdin)["input"]
try:
    text = urllib.request.urlopen(f"http://localhost:{int(request['serve'])}/by-name", timeout=5).read().decode()
except Exception as exc:
    text = f"refused: {exc}"
print(json.dumps({"ok": True, "content": text}))
