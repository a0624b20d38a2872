"""Egress proxy benchmark (issue 24): the first byte of a proxied request against a direct one on
loopback, measured in the same run.

direct      a fresh TCP connection to a loopback HTTP origin, a GET, until the first byte of the
            answer.
proxied     the same through tooldir's egress proxy (tooldir.sandbox.egress.EgressProxy, in this
            process, fed its listener the way the sandbox's prelude hands it over): a fresh
            connection to the proxy, ``CONNECT`` plus the GET in one write, until the first byte
            of the origin's answer (after the proxy's ``200``). The proxy checks the allowlist,
            connects to the origin and relays -- everything a sandboxed tool's request goes
            through but the sandbox's own loopback.
sandboxed   with ``--sandbox``: a real bubblewrapped tool (``network.allow``) times the same
            requests itself, through the proxy, from inside its namespace (whole run:
            perf_counter in the tool); its figures are printed beside the others.

Each round times ``--requests`` requests of each side, interleaved, and takes each side's p50;
the figure is min/median/max over ``--rounds`` rounds. Target: proxied p50 - direct p50 <= 5 ms.

    python3 benchmarks/bench_egress.py [--quick] [--rounds N] [--requests N] [--sandbox] [--json]
"""

from __future__ import annotations

import argparse
import array
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tooldir.netallow import parse_entries
from tooldir.sandbox.egress import EgressProxy

TARGET_MS = 5.0
ANSWER = b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"


class Origin:
    """A loopback HTTP origin that answers every request at once."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    @staticmethod
    def _answer(conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                data += chunk
            conn.sendall(ANSWER)


def first_byte_ms(port: int, payload: bytes, skip: int = 0) -> float:
    """Connect to 127.0.0.1:``port``, send ``payload``, and time until the first byte after the
    first ``skip`` bytes of the answer (the proxy's own ``200`` line)."""
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(payload)
        got = 0
        while got <= skip:
            chunk = s.recv(4096)
            if not chunk:
                raise RuntimeError("the connection closed before the answer")
            got += len(chunk)
        elapsed = (time.perf_counter() - start) * 1000
        while s.recv(4096):
            pass
    return elapsed


def start_proxy(origin_port: int) -> tuple[EgressProxy, int]:
    proxy = EgressProxy(parse_entries([f"127.0.0.1:{origin_port}"]))
    listener = socket.create_server(("127.0.0.1", 0), backlog=128)
    inner = socket.socket(fileno=socket.dup(proxy.inner_fd()))
    proxy.release_inner()
    proxy.start()
    inner.sendmsg([b"L"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [listener.fileno()]))])
    inner.close()
    port = listener.getsockname()[1]
    listener.close()
    return proxy, port


SANDBOXED_TOOL = """\
import json, socket, sys, time
req = json.load(sys.stdin)["input"]
port, n = req["port"], req["n"]
payload = f"CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\n\\r\\nGET / HTTP/1.0\\r\\n\\r\\n".encode()
skip = len(b"HTTP/1.1 200 Connection established\\r\\n\\r\\n")
out = []
for _ in range(n):
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", 3128)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(payload)
        got = 0
        while got <= skip:
            chunk = s.recv(4096)
            if not chunk:
                raise SystemExit("closed")
            got += len(chunk)
        out.append((time.perf_counter() - start) * 1000)
        while s.recv(4096):
            pass
print(json.dumps({"ok": True, "content": out}))
"""


def sandboxed_ms(origin_port: int, requests: int) -> list[float] | str:
    """p50s a real sandboxed tool measures for its proxied requests (one run), or why none."""
    from tooldir.policy import Policy
    from tooldir.run.registry import Registry
    from tooldir.sandbox import probe
    from tooldir.snapshot.loader import Loader, make_config
    from tooldir.snapshot.store import SnapshotStore

    policy = Policy.model_validate({"sandbox": {"network": True, "timeout_s": 120, "cpu_s": 120}})
    problem = probe(policy.sandbox)
    if problem is not None:
        return f"no sandbox here: {problem}"
    with tempfile.TemporaryDirectory() as tmp:
        tool = Path(tmp) / "user" / "bench_egress"
        tool.mkdir(parents=True)
        manifest = {
            "name": "bench_egress",
            "description": "Time proxied requests from inside the sandbox.",
            "input_schema": {"type": "object"},
            "risk": "external-read",
            "execute": {
                "command": ["python3", "run.py"],
                "timeout_s": 120,
                "network": {"allow": [f"127.0.0.1:{origin_port}"]},
            },
        }
        (tool / "schema.json").write_text(json.dumps(manifest))
        (tool / "run.py").write_text(SANDBOXED_TOOL)
        config = make_config(project=None, user_dirs=[tool.parent], policy=policy, state_dir=Path(tmp) / "state")
        registry = Registry(SnapshotStore(Loader(config).load()), policy=policy, state_dir=Path(tmp) / "state")
        result = registry.call("bench_egress", {"port": origin_port, "n": requests})
        if not result.ok:
            return f"the sandboxed tool failed: {result.error}"
        return [float(x) for x in result.content]


def p50(values: list[float]) -> float:
    return statistics.median(values)


def spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--requests", type=int)
    parser.add_argument("--sandbox", action="store_true", help="also time requests from a real sandboxed tool")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 7)
    requests = args.requests or (50 if args.quick else 200)
    origin = Origin()
    proxy, proxy_port = start_proxy(origin.port)
    direct_payload = b"GET / HTTP/1.0\r\n\r\n"
    connect = f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1\r\n\r\n".encode() + direct_payload
    skip = len(b"HTTP/1.1 200 Connection established\r\n\r\n")
    plain = f"GET http://127.0.0.1:{origin.port}/ HTTP/1.1\r\n\r\n".encode()
    for _ in range(20):  # warm up both paths
        first_byte_ms(origin.port, direct_payload)
        first_byte_ms(proxy_port, connect, skip)
    direct_p50: list[float] = []
    connect_p50: list[float] = []
    plain_p50: list[float] = []
    for _ in range(rounds):
        d, c, p = [], [], []
        for _ in range(requests):
            d.append(first_byte_ms(origin.port, direct_payload))
            c.append(first_byte_ms(proxy_port, connect, skip))
            p.append(first_byte_ms(proxy_port, plain))
        direct_p50.append(p50(d))
        connect_p50.append(p50(c))
        plain_p50.append(p50(p))
    recorded = len(proxy.close())
    sandboxed = sandboxed_ms(origin.port, requests) if args.sandbox else None
    added = [c - d for c, d in zip(connect_p50, direct_p50, strict=True)]
    added_plain = [p - d for p, d in zip(plain_p50, direct_p50, strict=True)]
    report: dict[str, Any] = {
        "rounds": rounds,
        "requests_per_round": requests,
        "measured": "in-process (the proxy in this process; the origin and clients on loopback)",
        "direct_p50_ms": spread(direct_p50),
        "connect_p50_ms": spread(connect_p50),
        "plain_http_p50_ms": spread(plain_p50),
        "added_connect_ms": spread(added),
        "added_plain_http_ms": spread(added_plain),
        "connections_recorded": recorded,
        "target_ms": TARGET_MS,
        "within_target": statistics.median(added) <= TARGET_MS and statistics.median(added_plain) <= TARGET_MS,
    }
    if isinstance(sandboxed, list):
        report["sandboxed_connect_p50_ms"] = p50(sandboxed)
        report["sandboxed_added_ms"] = p50(sandboxed) - statistics.median(direct_p50)
    elif sandboxed is not None:
        report["sandboxed"] = sandboxed
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"egress proxy, first byte on loopback ({rounds} rounds x {requests} requests, p50 per round, in-process)")
    for label, key in (
        ("direct", "direct_p50_ms"),
        ("proxied CONNECT", "connect_p50_ms"),
        ("proxied plain HTTP", "plain_http_p50_ms"),
        ("added (CONNECT)", "added_connect_ms"),
        ("added (plain HTTP)", "added_plain_http_ms"),
    ):
        s = report[key]
        print(f"  {label:<20} min {s['min']:.3f}  median {s['median']:.3f}  max {s['max']:.3f} ms")
    if "sandboxed_connect_p50_ms" in report:
        print(
            f"  sandboxed tool (whole run, timed inside): CONNECT p50 {report['sandboxed_connect_p50_ms']:.3f} ms, "
            f"{report['sandboxed_added_ms']:+.3f} ms against direct"
        )
    elif "sandboxed" in report:
        print(f"  sandboxed: {report['sandboxed']}")
    verdict = "within" if report["within_target"] else "OVER"
    print(f"  target: added <= {TARGET_MS} ms: {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
