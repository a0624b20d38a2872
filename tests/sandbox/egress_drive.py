"""Drive one real egress run end to end, as whoever runs this file (root, or a throwaway user):

``python egress_drive.py WORKDIR`` starts two loopback listeners (an HTTP server on P, a bare
listener on Q), writes a user tool allowed ``127.0.0.1:P`` and ``localhost:Q`` and a policy with
``sandbox.network = true``, runs ``tooldir run --json`` on it in a subprocess, and prints one JSON
document: the run's output, the audit line, what the listeners saw, and the two ports.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, ClassVar

TOOL = r"""
import json, os, socket, sys, urllib.request
req = json.load(sys.stdin)["input"]
p, q = req["p"], req["q"]
out = {}
def get(url):
    try:
        return urllib.request.urlopen(url, timeout=5).read().decode()
    except Exception as exc:
        return "ERR " + str(exc)
out["allowed"] = get(f"http://127.0.0.1:{p}/allowed")
out["other_port"] = get(f"http://127.0.0.1:{p + 1}/x")
out["other_address"] = get(f"http://127.0.0.2:{p}/x")
out["name_to_loopback"] = get(f"http://localhost:{q}/x")
s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
s.sendall(f"CONNECT 127.0.0.1:{p} HTTP/1.1\r\n\r\nGET /tunnel HTTP/1.0\r\n\r\n".encode())
got = b""
while chunk := s.recv(4096):
    got += chunk
out["connect"] = got.decode()
raw = {}
for host, port in (("127.0.0.1", p), ("127.0.0.1", q), ("10.0.0.1", 80), ("::1", p)):
    try:
        socket.create_connection((host, port), timeout=3).close()
        raw[f"{host}:{port}"] = "CONNECTED"
    except OSError as exc:
        raw[f"{host}:{port}"] = type(exc).__name__ + ": " + str(exc)
out["raw"] = raw
try:
    socket.getaddrinfo("example.com", 80)
    out["dns"] = "RESOLVED"
except OSError as exc:
    out["dns"] = str(exc)
out["env"] = {k: v for k, v in os.environ.items() if "proxy" in k.lower()}
print(json.dumps({"ok": True, "content": out}))
"""


class Handler(http.server.BaseHTTPRequestHandler):
    paths: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.paths.append(self.path)
        body = f"hello {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def main(workdir: Path) -> dict[str, Any]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    p = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    bare = socket.create_server(("127.0.0.1", 0))
    q = bare.getsockname()[1]
    bare.setblocking(False)
    user = workdir / "tools"
    tool = user / "egress_probe"
    tool.mkdir(parents=True)
    os.chmod(workdir, 0o700)
    manifest = {
        "name": "egress_probe",
        "description": "Reach one allowed loopback server and try everything else.",
        "input_schema": {"type": "object", "properties": {"p": {"type": "integer"}, "q": {"type": "integer"}}},
        "risk": "external-read",
        "execute": {
            "command": ["python3", "run.py"],
            "timeout_s": 30,
            "network": {"allow": [f"127.0.0.1:{p}", f"localhost:{q}"]},
        },
    }
    (tool / "schema.json").write_text(json.dumps(manifest))
    (tool / "run.py").write_text(TOOL)
    policy = workdir / "policy.toml"
    policy.write_text("[sandbox]\nnetwork = true\ntimeout_s = 30\n")
    state = workdir / "state"
    project = workdir / "project"
    project.mkdir()
    argv = [sys.executable, "-m", "tooldir", "run", "egress_probe", "--input", json.dumps({"p": p, "q": q})]
    argv += ["--json", "--user-dir", str(user), "--policy", str(policy), "--state-dir", str(state)]
    argv += ["--project", str(project)]
    done = subprocess.run(argv, capture_output=True, timeout=120, check=False, cwd=project)
    try:
        bare.accept()
        accepted_q = True
    except BlockingIOError:
        accepted_q = False
    server.shutdown()
    server.server_close()
    bare.close()
    verify = [sys.executable, "-m", "tooldir", "audit", "verify", "--state-dir", str(state), "--json"]
    verified = subprocess.run(verify, capture_output=True, timeout=60, check=False, cwd=project)
    audit = [json.loads(line) for line in (state / "audit.jsonl").read_text().splitlines() if line.strip()]
    return {
        "exit": done.returncode,
        "run": json.loads(done.stdout) if done.stdout.strip() else None,
        "stderr": done.stderr.decode("utf-8", "replace")[-3000:],
        "audit": audit[-1],
        "audit_verify_exit": verified.returncode,
        "served": Handler.paths,
        "q_accepted": accepted_q,
        "p": p,
        "q": q,
    }


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
