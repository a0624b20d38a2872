import json
import socket
import sys

request = json.load(sys.stdin)
port = int(request["input"]["text"])
result = {}
for name, address in [
    ("internet", ("1.1.1.1", 53)),
    ("internet-v6", ("2606:4700:4700::1111", 53)),
    ("host-loopback", ("127.0.0.1", port)),
]:
    try:
        socket.create_connection(address, timeout=2).close()
        result[name] = "CONNECTED"
    except OSError as exc:
        result[name] = f"blocked: {type(exc).__name__}"
try:
    socket.getaddrinfo("example.org", 443)
    result["dns"] = "RESOLVED"
except OSError as exc:
    result["dns"] = f"blocked: {type(exc).__name__}"
print(json.dumps({"ok": True, "content": result}))
