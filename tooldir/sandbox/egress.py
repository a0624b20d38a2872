"""The egress proxy: the only way out of a sandbox whose tool declares ``network.allow``.

The sandbox keeps its own network namespace (``--unshare-net``: only ``lo``, no route out). Its
first process is :data:`PRELUDE`, which listens on ``127.0.0.1:3128`` *inside* that namespace,
hands the listening socket to tooldir over an inherited Unix socket (``SCM_RIGHTS``) and then
``exec``s the tool, announced to it as ``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY``. tooldir
accepts on that socket outside the sandbox (a file descriptor works whatever namespace its socket
lives in), so no socket file, path or permission is shared with anything, the same way as root
and unprivileged, and the tool never holds the listener (it is close-on-exec).

:class:`EgressProxy` serves HTTP ``CONNECT host:port`` and plain absolute-URI requests
(``GET http://host:port/...``). It resolves names itself (the tool has no DNS), connects only to
what :func:`tooldir.netallow.allows` lets through, refuses a name that resolves to a loopback,
private, link-local, metadata or other non-global address unless that address is listed literally
(DNS rebinding), and records every connection, allowed or refused: host, port, resolved address,
bytes each way, the refusal's reason. A raw ``connect()`` from inside reaches nothing: there is no
route out of the namespace, and nothing but the proxy's listener inside it.
"""

from __future__ import annotations

import array
import contextlib
import errno
import os
import select
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..netallow import AllowEntry, address_listed, allows, is_public, normalise_host

PROXY_HOST = "127.0.0.1"
PROXY_PORT = 3128
PROXY_URL = f"http://{PROXY_HOST}:{PROXY_PORT}"
PROXY_ENV_NAMES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy")
MAX_HEAD = 16 * 1024  # a request line and its headers
MAX_OPEN = 64  # connections open at once per run; past it a new one is refused (and recorded)
MAX_RECORDED = 512  # connections recorded one by one per run; the rest are summed in one more record
HEAD_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 10.0
CHUNK = 64 * 1024

#: The sandbox's first process: ``python3 -I -S -c PRELUDE FD TOOL_ARGV...``. It listens inside the
#: sandbox's namespace, sends the listener over FD, closes both and becomes the tool.
PRELUDE = (
    "import array,os,socket,sys\n"
    "fd=int(sys.argv[1])\n"
    "try:\n"
    " s=socket.socket(socket.AF_INET,socket.SOCK_STREAM)\n"
    f" s.bind(({PROXY_HOST!r},{PROXY_PORT}));s.listen(128)\n"
    " c=socket.socket(socket.AF_UNIX,socket.SOCK_STREAM,fileno=fd)\n"
    " c.sendmsg([b'L'],[(socket.SOL_SOCKET,socket.SCM_RIGHTS,array.array('i',[s.fileno()]))])\n"
    " c.close();s.close()\n"
    "except OSError as e:\n"
    " sys.stderr.write(f'tooldir: the sandbox could not set up its network proxy: {e}\\n');sys.exit(125)\n"
    "os.execv(sys.argv[2],sys.argv[2:])\n"
)


def proxy_env() -> dict[str, str]:
    """What the tool is told: every proxy variable names the proxy; nothing bypasses it."""
    env = dict.fromkeys(PROXY_ENV_NAMES, PROXY_URL)
    env["NO_PROXY"] = env["no_proxy"] = ""
    return env


@dataclass(slots=True)
class Connection:
    """One connection the tool asked the proxy for. ``refused`` is None when it was made, else
    the reason (``not-allowed``, ``non-public-address``, ``resolve-failed``, ``connect-failed``,
    ``bad-request``, ``too-many-connections``) followed by the detail."""

    host: str
    port: int | None
    address: str | None = None
    bytes_up: int = 0
    bytes_down: int = 0
    refused: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "port": self.port,
            "address": self.address,
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "refused": self.refused,
        }


Resolver = Callable[[str, int], Sequence[str]]


def system_resolver(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to here (TCP), in the resolver's order."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class _Refused(Exception):
    def __init__(self, reason: str, status: int = 403) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


class EgressProxy:
    """One run's proxy. :meth:`inner_fd` is the socket end the sandbox inherits (its number goes
    to :data:`PRELUDE`); :meth:`start` serves on a thread; :meth:`close` (after the run) stops
    everything and returns the connections, in the order they were asked for."""

    def __init__(self, allow: Sequence[AllowEntry], *, resolver: Resolver = system_resolver) -> None:
        self.allow = tuple(allow)
        self._resolver = resolver
        self._outer, self._inner = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._outer.set_inheritable(False)
        self._inner.set_inheritable(False)  # pass_fds makes it inheritable for bubblewrap alone
        self._wake_read, self._wake_write = os.pipe2(os.O_CLOEXEC)
        self._lock = threading.Lock()
        self._connections: list[Connection] = []
        self._overflow = Connection("", None)
        self._overflowed = 0
        self._unlisted: set[int] = set()
        self._open: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._thread: threading.Thread | None = None

    def inner_fd(self) -> int:
        return self._inner.fileno()

    def release_inner(self) -> None:
        """Close tooldir's copy of the sandbox's end once bubblewrap holds its own."""
        self._inner.close()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._serve, name="tooldir-egress", daemon=True)
        self._thread.start()

    def close(self) -> list[Connection]:
        with self._lock:
            self._closed = True
            live = list(self._open)
        with contextlib.suppress(OSError):
            os.write(self._wake_write, b"x")
        for sock in live:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join()
        for thread in list(self._threads):
            thread.join()
        for sock in (self._outer, self._inner):
            sock.close()
        for fd in (self._wake_read, self._wake_write):
            with contextlib.suppress(OSError):
                os.close(fd)
        with self._lock:
            out = list(self._connections)
            if self._overflowed:
                self._overflow.refused = (
                    f"more: {self._overflowed} further connection(s) past the first {MAX_RECORDED}, summed here "
                    "(host and port not kept)"
                )
                out.append(self._overflow)
            return out

    # -- the listener ---------------------------------------------------------------------------

    def _serve(self) -> None:
        listener = self._receive_listener()
        if listener is None:
            return
        with listener:
            while True:
                ready, _, _ = select.select([listener.fileno(), self._wake_read], [], [])
                if self._wake_read in ready:
                    return
                try:
                    client, _ = listener.accept()
                except OSError:
                    continue
                with self._lock:
                    if self._closed:
                        client.close()
                        return
                    over = sum(1 for t in self._threads if t.is_alive()) >= MAX_OPEN
                    self._threads = [t for t in self._threads if t.is_alive()]
                    self._open.add(client)
                    connection = self._slot()  # recorded in the order asked for, filled in as it goes
                if over:
                    connection.refused = f"too-many-connections: {MAX_OPEN} are open"
                    self._drop(client, _reply(429, f"too many connections: {MAX_OPEN} are open"))
                    continue
                thread = threading.Thread(
                    target=self._handle, args=(client, connection), name="tooldir-egress-conn", daemon=True
                )
                self._threads.append(thread)
                thread.start()

    def _receive_listener(self) -> socket.socket | None:
        """The sandbox's listener, sent once by :data:`PRELUDE`; then the channel is closed (a
        later message, from anything else in the sandbox, is never read)."""
        fds = array.array("i")
        try:
            while True:
                ready, _, _ = select.select([self._outer.fileno(), self._wake_read], [], [])
                if self._wake_read in ready:
                    return None
                data, ancdata, _, _ = self._outer.recvmsg(1, socket.CMSG_SPACE(fds.itemsize))
                break
        except OSError:
            return None
        finally:
            self._outer.close()
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
        if data != b"L" or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            return None
        sock = socket.socket(fileno=fds[0])
        if sock.family != socket.AF_INET or sock.type != socket.SOCK_STREAM:
            sock.close()
            return None
        return sock

    def _slot(self) -> Connection:
        """A new connection's record, listed now (under the lock) if within :data:`MAX_RECORDED`;
        past it the record is summed into the last entry when its connection ends."""
        connection = Connection("", None)
        if len(self._connections) < MAX_RECORDED:
            self._connections.append(connection)
        else:
            self._overflowed += 1
            self._unlisted.add(id(connection))
        return connection

    def _ended(self, connection: Connection) -> None:
        with self._lock:
            if id(connection) in self._unlisted:
                self._unlisted.discard(id(connection))
                self._overflow.bytes_up += connection.bytes_up
                self._overflow.bytes_down += connection.bytes_down

    def _drop(self, sock: socket.socket, reply: bytes | None = None) -> None:
        if reply is not None:
            with contextlib.suppress(OSError):
                sock.sendall(reply)
        with self._lock:
            self._open.discard(sock)
        sock.close()

    # -- one connection -------------------------------------------------------------------------

    def _handle(self, client: socket.socket, connection: Connection) -> None:
        upstream: socket.socket | None = None
        try:
            client.settimeout(HEAD_TIMEOUT_S)
            head, rest = _read_head(client)
            method, target, version, headers = _parse_head(head)
            if method == "CONNECT":
                host, port = _authority(target, None)
            else:
                host, port, path = _absolute_url(target)
            connection.host, connection.port = host, port
            kind_host = normalise_host(host)
            if kind_host is None:
                raise _Refused(f"bad-request: {host!r} is neither a host name nor an address", 400)
            kind, name = kind_host
            if not allows(self.allow, kind, name, port):
                raise _Refused(f"not-allowed: {_shown(host, port)} is not on the tool's network allowlist")
            address = self._pick_address(kind, name, port, connection)
            connection.address = address
            upstream = self._connect(address, port)
            if upstream is None:
                connection.refused = f"connect-failed: {address} port {port}: the run ended while connecting"
                return
            if method == "CONNECT":
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                first = rest
            else:
                first = _origin_request(method, path, version, headers) + rest
            if first:
                upstream.sendall(first)
                connection.bytes_up += len(first)
            client.settimeout(None)
            upstream.settimeout(None)
            self._relay(client, upstream, connection)
        except _Refused as refused:
            connection.refused = refused.reason
            with contextlib.suppress(OSError):
                client.sendall(_reply(refused.status, refused.reason))
        except OSError:
            pass  # the tool went away, or the run ended; what was relayed is recorded
        finally:
            self._ended(connection)
            if upstream is not None:
                self._drop(upstream)
            self._drop(client)

    def _connect(self, address: str, port: int) -> socket.socket | None:
        """A connection to ``address``, waiting at most :data:`CONNECT_TIMEOUT_S`, and no longer
        than the run: :meth:`close` wakes it (None then)."""
        sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM)
        with self._lock:
            if self._closed:
                sock.close()
                return None
            self._open.add(sock)
        try:
            sock.setblocking(False)
            code = sock.connect_ex((address, port))
            if code not in (0, errno.EINPROGRESS):
                raise OSError(code, os.strerror(code))
            if code:
                _, writable, _ = select.select([self._wake_read], [sock.fileno()], [], CONNECT_TIMEOUT_S)
                if not writable:
                    if self._closed:
                        self._drop(sock)
                        return None
                    raise OSError(errno.ETIMEDOUT, f"no answer within {CONNECT_TIMEOUT_S:g} s")
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if code:
                    raise OSError(code, os.strerror(code))
            sock.setblocking(True)
        except OSError as exc:
            self._drop(sock)
            raise _Refused(f"connect-failed: {address} port {port}: {exc.strerror or exc}", 502) from None
        return sock

    def _pick_address(self, kind: str, name: str, port: int, connection: Connection) -> str:
        """The address to connect to: the literal itself, or the first address ``name``
        resolves to that is public or listed literally."""
        if kind == "address":
            return name
        try:
            addresses = self._resolver(name, port)
        except (OSError, UnicodeError) as exc:
            raise _Refused(f"resolve-failed: {name}: {exc}", 502) from None
        for address in addresses:
            if is_public(address) or address_listed(self.allow, address, port):
                return address
        if not addresses:
            raise _Refused(f"resolve-failed: {name} has no address", 502)
        connection.address = addresses[0]
        raise _Refused(
            f"non-public-address: {name} resolves to {', '.join(addresses[:4])} (loopback, private, link-local "
            f"or otherwise not global); list the address itself (e.g. '{_shown(addresses[0], port)}') to allow it"
        )

    def _relay(self, client: socket.socket, upstream: socket.socket, connection: Connection) -> None:
        """Bytes both ways until both sides are done (a half-close is passed on)."""
        ends = {client: upstream, upstream: client}
        reading = [client, upstream]
        while reading:
            ready, _, _ = select.select(reading, [], [])
            for sock in ready:
                data = sock.recv(CHUNK)
                other = ends[sock]
                if not data:
                    reading.remove(sock)
                    with contextlib.suppress(OSError):
                        other.shutdown(socket.SHUT_WR)
                    continue
                other.sendall(data)
                if sock is client:
                    connection.bytes_up += len(data)
                else:
                    connection.bytes_down += len(data)


def _shown(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _reply(status: int, reason: str) -> bytes:
    words = {400: "Bad Request", 403: "Forbidden", 429: "Too Many Requests", 502: "Bad Gateway"}
    body = f"tooldir proxy: {reason}\n".encode("utf-8", "replace")
    return (
        f"HTTP/1.1 {status} {words.get(status, 'Error')}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


def _read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    """The request head (up to the blank line) and whatever came after it."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD:
            raise _Refused(f"bad-request: the request head is longer than {MAX_HEAD} bytes", 400)
        chunk = sock.recv(4096)
        if not chunk:
            raise _Refused("bad-request: the connection closed before a complete request", 400)
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _parse_head(head: bytes) -> tuple[str, str, str, list[tuple[str, str]]]:
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise _Refused("bad-request: the request head is not ASCII", 400) from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _Refused(f"bad-request: {lines[0][:80]!r} is not an HTTP/1.x request line", 400)
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise _Refused(f"bad-request: bad header line {line[:80]!r}", 400)
        headers.append((name, value.strip()))
    return parts[0].upper(), parts[1], parts[2], headers


def _authority(text: str, default_port: int | None) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` (the port may default) -> (host without brackets, port)."""
    if text.startswith("["):
        host, sep, after = text[1:].partition("]")
        port_text = after[1:] if after.startswith(":") else ""
        if not sep or (after and not after.startswith(":")):
            raise _Refused(f"bad-request: {text[:80]!r} is not host:port", 400)
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            host, port_text = text, ""
    if not port_text:
        if default_port is None:
            raise _Refused(f"bad-request: {text[:80]!r} has no port", 400)
        return host, default_port
    if not port_text.isascii() or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise _Refused(f"bad-request: {text[:80]!r} has no valid port", 400)
    return host, int(port_text)


def _absolute_url(target: str) -> tuple[str, int, str]:
    """``http://host[:port]/path`` -> (host, port, path). Only plain HTTP: HTTPS goes through CONNECT."""
    if not target.lower().startswith("http://"):
        raise _Refused(f"bad-request: {target[:80]!r} is not an absolute http:// URL (use CONNECT for https)", 400)
    rest = target[len("http://") :]
    cut = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    authority, path = rest[:cut], rest[cut:] or "/"
    if "@" in authority:
        raise _Refused("bad-request: credentials in a proxied URL are refused", 400)
    host, port = _authority(authority, 80)
    if path.startswith("?"):
        path = "/" + path
    return host, port, path.split("#", 1)[0]


def _origin_request(method: str, path: str, version: str, headers: list[tuple[str, str]]) -> bytes:
    """The request as the origin server gets it: origin-form path, no proxy headers, one request."""
    kept = [(n, v) for n, v in headers if n.lower() not in ("proxy-connection", "proxy-authorization", "connection")]
    lines = [f"{method} {path} {version}", *(f"{n}: {v}" for n, v in kept), "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")
