"""The egress proxy of issue 24 (tooldir.sandbox.egress), in-process over real loopback sockets: the
test plays the sandbox's prelude (it hands the proxy a listening socket over the inherited Unix
socket) and the tool (it connects to that listener). Name resolution is the one thing replaced: a
resolver that answers what a hostile DNS would, so rebinding can be tried without any network."""

from __future__ import annotations

import array
import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

from tooldir.netallow import parse_entries
from tooldir.sandbox.egress import EgressProxy, proxy_env


class Origin:
    """A loopback server that answers each connection with what it received, prefixed."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.sock = socket.create_server((host, 0))
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        self.accepted = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                self.received.append(data)
                conn.sendall(b"HTTP/1.0 200 OK\r\n\r\nechoed " + data)

    def close(self) -> None:
        self.sock.close()


@contextmanager
def running(allow: Sequence[str], resolver: Any = None) -> Iterator[tuple[EgressProxy, int]]:
    """A started proxy serving a listener the way the prelude hands it over; yields (proxy, its port)."""
    kwargs = {} if resolver is None else {"resolver": resolver}
    proxy = EgressProxy(parse_entries(allow), **kwargs)
    listener = socket.create_server(("127.0.0.1", 0))
    inner = socket.socket(fileno=socket.dup(proxy.inner_fd()))
    proxy.release_inner()
    proxy.start()
    inner.sendmsg([b"L"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [listener.fileno()]))])
    inner.close()
    port = listener.getsockname()[1]
    listener.close()
    try:
        yield proxy, port
    finally:
        proxy.close()


def ask(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(request)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(4096):
            out += chunk
        return out


@pytest.fixture
def origin() -> Iterator[Origin]:
    server = Origin()
    yield server
    server.close()


def test_a_connect_to_an_allowed_address_relays_both_ways_and_is_recorded_with_its_bytes(origin: Origin) -> None:
    with running([f"127.0.0.1:{origin.port}"]) as (proxy, port):
        reply = ask(port, f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1\r\n\r\nGET / HTTP/1.0\r\n\r\n".encode())
    connections = proxy.close()
    assert reply.startswith(b"HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.0 200 OK")
    assert b"echoed GET / HTTP/1.0" in reply
    assert [c.to_json() for c in connections] == [
        {
            "host": "127.0.0.1",
            "port": origin.port,
            "address": "127.0.0.1",
            "bytes_up": len(b"GET / HTTP/1.0\r\n\r\n"),
            "bytes_down": len(reply) - len(b"HTTP/1.1 200 Connection established\r\n\r\n"),
            "refused": None,
        }
    ]


def test_a_plain_http_request_reaches_the_origin_in_origin_form_with_no_proxy_headers(origin: Origin) -> None:
    request = (
        f"GET http://127.0.0.1:{origin.port}/issues/1?x=2 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Proxy-Authorization: Basic eA==\r\nProxy-Connection: keep-alive\r\n\r\n"
    )
    with running([f"127.0.0.1:{origin.port}"]) as (proxy, port):
        reply = ask(port, request.encode())
    assert b"200 OK" in reply
    assert origin.received == [b"GET /issues/1?x=2 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"]
    (connection,) = proxy.close()
    assert connection.refused is None and connection.address == "127.0.0.1"


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("127.0.0.1:{other}", "not-allowed"),
        ("127.0.0.2:{port}", "not-allowed"),
        ("[::1]:{port}", "not-allowed"),
        ("localhost:{port}", "not-allowed"),
    ],
    ids=["another-port", "another-address", "ipv6-loopback", "a-name-not-listed"],
)
def test_a_destination_not_on_the_list_is_refused_with_403_and_recorded(
    origin: Origin, target: str, reason: str
) -> None:
    shown = target.format(port=origin.port, other=origin.port + 1)
    with running([f"127.0.0.1:{origin.port}"]) as (proxy, port):
        reply = ask(port, f"CONNECT {shown} HTTP/1.1\r\n\r\n".encode())
    assert reply.startswith(b"HTTP/1.1 403 Forbidden")
    (connection,) = proxy.close()
    assert connection.refused is not None and connection.refused.startswith(reason + ":")
    assert connection.address is None and connection.bytes_up == connection.bytes_down == 0
    assert origin.accepted == 0


@pytest.mark.parametrize(
    "address", ["127.0.0.1", "10.0.0.5", "192.168.1.1", "169.254.169.254", "fd00::1", "::ffff:127.0.0.1", "::1"]
)
def test_an_allowed_name_that_resolves_to_a_non_public_address_is_refused(origin: Origin, address: str) -> None:
    with running([f"api.example.com:{origin.port}"], resolver=lambda host, port: [address]) as (proxy, port):
        reply = ask(port, f"CONNECT api.example.com:{origin.port} HTTP/1.1\r\n\r\n".encode())
    assert reply.startswith(b"HTTP/1.1 403 Forbidden") and b"non-public-address" in reply
    (connection,) = proxy.close()
    assert connection.refused is not None and connection.refused.startswith("non-public-address:")
    assert connection.address == address
    assert origin.accepted == 0


def test_an_allowed_name_that_resolves_to_loopback_is_reached_when_the_address_is_listed_literally(
    origin: Origin,
) -> None:
    allow = [f"api.example.com:{origin.port}", f"127.0.0.1:{origin.port}"]
    with running(allow, resolver=lambda host, port: ["127.0.0.1"]) as (proxy, port):
        reply = ask(port, f"CONNECT api.example.com:{origin.port} HTTP/1.1\r\n\r\nGET / HTTP/1.0\r\n\r\n".encode())
    assert b"echoed GET /" in reply
    (connection,) = proxy.close()
    assert (connection.host, connection.address, connection.refused) == ("api.example.com", "127.0.0.1", None)


def test_a_name_that_does_not_resolve_is_refused_with_the_reason(origin: Origin) -> None:
    def fails(host: str, port: int) -> list[str]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    with running([f"api.example.com:{origin.port}"], resolver=fails) as (proxy, port):
        reply = ask(port, f"CONNECT api.example.com:{origin.port} HTTP/1.1\r\n\r\n".encode())
    assert reply.startswith(b"HTTP/1.1 502")
    (connection,) = proxy.close()
    assert connection.refused is not None and connection.refused.startswith("resolve-failed: api.example.com")


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /relative HTTP/1.1\r\n\r\n",
        b"GET https://127.0.0.1/ HTTP/1.1\r\n\r\n",
        b"CONNECT 127.0.0.1 HTTP/1.1\r\n\r\n",
        b"CONNECT 127.0.0.1:99999 HTTP/1.1\r\n\r\n",
        b"GET http://user:pw@127.0.0.1/ HTTP/1.1\r\n\r\n",
        b"NONSENSE\r\n\r\n",
        b"\xff\xfe\r\n\r\n",
    ],
    ids=["relative", "https-url", "no-port", "bad-port", "credentials", "no-version", "not-ascii"],
)
def test_a_malformed_request_gets_400_and_is_recorded_as_bad_request(request_bytes: bytes) -> None:
    with running(["127.0.0.1:80"]) as (proxy, port):
        reply = ask(port, request_bytes)
    assert reply.startswith(b"HTTP/1.1 400 Bad Request")
    (connection,) = proxy.close()
    assert connection.refused is not None and connection.refused.startswith("bad-request:")


def test_a_connection_refused_by_the_destination_is_recorded_as_connect_failed(origin: Origin) -> None:
    closed = socket.create_server(("127.0.0.1", 0))
    dead = closed.getsockname()[1]
    closed.close()
    with running([f"127.0.0.1:{dead}"]) as (proxy, port):
        reply = ask(port, f"CONNECT 127.0.0.1:{dead} HTTP/1.1\r\n\r\n".encode())
    assert reply.startswith(b"HTTP/1.1 502")
    (connection,) = proxy.close()
    assert connection.refused is not None and connection.refused.startswith("connect-failed: 127.0.0.1")


def test_every_proxy_variable_names_the_proxy_and_nothing_bypasses_it() -> None:
    env = proxy_env()
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy"):
        assert env[name] == "http://127.0.0.1:3128"
    assert env["NO_PROXY"] == env["no_proxy"] == ""


def test_past_the_recorded_bound_further_connections_are_summed_in_one_last_record(
    origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tooldir.sandbox import egress

    monkeypatch.setattr(egress, "MAX_RECORDED", 2)
    with running([f"127.0.0.1:{origin.port}"]) as (proxy, port):
        replies = [ask(port, f"CONNECT 127.0.0.1:{n} HTTP/1.1\r\n\r\n".encode()) for n in (1, 2, 3, 4)]
    assert all(r.startswith(b"HTTP/1.1 403") for r in replies)
    connections = proxy.close()
    assert [c.port for c in connections] == [1, 2, None]
    assert connections[-1].refused is not None and connections[-1].refused.startswith("more: 2 further connection(s)")
