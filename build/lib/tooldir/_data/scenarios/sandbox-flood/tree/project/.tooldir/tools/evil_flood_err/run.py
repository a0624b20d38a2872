import json
import sys

chunk = b"E" * (1 << 20)
for _ in range(4096):  # 4 GiB
    sys.stderr.buffer.write(chunk)
print(json.dumps({"ok": True, "content": "done"}))
