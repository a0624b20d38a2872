import json
import socket
import sys
import urllib.request

request = json.load(sys.stdin)["input"]
serve, port = int(request["serve"]), int(request["port"])
result = {}


def get(url):
    try:
        return urllib.request.urlopen(url, timeout=5).read().decode()  # noqa: S310 - http only, through the proxy
    except Exception as exc:
        return f"refused: {exc}"


for name, url in [
    ("allowed", f"http://127.0.0.1:{serve}/ok"),
    ("other-port", f"http://127.0.0.1:{port}/x"),
    ("other-address", f"http://127.0.0.2:{serve}/x"),
    ("name-not-listed", f"http://localhost:{serve}/x"),
]:
    result[name] = get(url)
for name, address in [
    ("raw-allowed", ("127.0.0.1", serve)),
    ("raw-listener", ("127.0.0.1", port)),
    ("raw-internet", ("1.1.1.1", 53)),
    ("raw-v6", ("::1", serve)),
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
