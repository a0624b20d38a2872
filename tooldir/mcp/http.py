"""``tooldir serve --http HOST:PORT --token-file FILE``: the MCP server over Streamable HTTP.

The SDK's Streamable HTTP transport (``Server.streamable_http_app``) serves ``/mcp`` through
uvicorn; in front of it :class:`Guard` (small, exact, pure ASGI) refuses, before the SDK sees
anything:

* a ``Host`` that is not exactly the bound ``HOST:PORT`` -- ``421`` (DNS rebinding: a web page
  whose name was re-pointed at 127.0.0.1 still sends its own name);
* an ``Origin`` (browsers send one) that is not ``http://HOST:PORT`` -- ``403``;
* a request without ``Authorization: Bearer <token>`` matching the token file (compared in
  constant time with :func:`hmac.compare_digest`) -- ``401`` with ``WWW-Authenticate: Bearer``.

It never starts open: no token file, or one that is not a regular file owned by this user,
is readable or writable by group or others, is empty or shorter than :data:`MIN_TOKEN_CHARS`,
is refused (:class:`HttpSetupError`, exit 2). Only loopback addresses may be bound unless the
caller opts in to another one (``allow_remote``; logged as a warning on start).

It never starves (``serve:starve``): any local user can connect without the token, so
:class:`ConnectionLimiter` bounds the open connections (:func:`connection_cap`: at most
:data:`MAX_CONNECTIONS`, within the descriptor limit, whose soft value is raised to the hard one
at start) and, when full, makes room by closing the oldest connection that is not being served
(still sending its request, or idle between requests); every request must arrive whole (headers
and body) within :data:`REQUEST_DEADLINE_S` of its first byte (or of the connection) however
slowly it trickles (:func:`guarded_protocol`, uvicorn's h11 protocol with a deadline); a failed
``accept()`` (out of descriptors) is one rate-limited warning, never a traceback or a busy loop
(:class:`AcceptGuard`). A per-peer bound would mean nothing on loopback: every local user
is 127.0.0.1.

All HTTP clients share one tooldir session (one working set of loaded tools, one usage model):
one client's ``tool_search`` loads tools for all of them, and every client gets its own MCP
session and every ``tools/list_changed`` (:func:`many_clients_notifier`). This module is
imported only when ``--http`` is given, so stdio serving never loads the HTTP stack.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hmac
import ipaddress
import logging
import os
import signal
import socket
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from .._internal.smallfile import Unreadable, read_private
from ..errors import ConfigError

log = logging.getLogger("tooldir.serve")

MIN_TOKEN_CHARS = 16
MAX_TOKEN_BYTES = 4096
MCP_PATH = "/mcp"
GRACEFUL_SHUTDOWN_S = 5  # seconds (uvicorn takes an int)
#: Open HTTP connections at most (fewer when the descriptor limit is low, see connection_cap).
MAX_CONNECTIONS = 512
#: Descriptors kept free of connections: tool runs, validation workers, the watcher, the audit log.
FD_RESERVE = 256  # also above LISTEN_BACKLOG: a burst accepted in one tick fits beside the cap
MIN_CONNECTIONS = 8
#: A request (request line, headers and body) must have arrived whole this long after its first
#: byte, or after the connection opened; trickling bytes never extends it.
REQUEST_DEADLINE_S = 10.0
#: An idle connection between requests is closed after this (uvicorn's keep-alive timeout).
KEEP_ALIVE_S = 5
#: The listen queue, and the most ``accept()`` calls asyncio makes per readiness event (also when
#: each fails with EMFILE: CPython 3.11 does not stop at the first failure).
LISTEN_BACKLOG = 128

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class HttpSetupError(ConfigError):
    """``--http`` or ``--token-file`` cannot be used as given (the server does not start; exit 2)."""


@dataclass(frozen=True, slots=True)
class Bind:
    host: str  # as given, without brackets: "127.0.0.1", "::1", "localhost"
    port: int

    @property
    def authority(self) -> str:
        """``HOST:PORT`` as a client writes it in ``Host`` (IPv6 in brackets)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.authority}{MCP_PATH}"

    def is_loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def parse_bind(text: str) -> Bind:
    """``HOST:PORT``, ``[V6]:PORT`` or just ``PORT`` (then 127.0.0.1). Port 0 picks a free port
    (:func:`serve_http` reports the one it got)."""
    raw = text.strip()
    if raw.isdigit():
        host, port_text = "127.0.0.1", raw
    elif raw.startswith("["):
        close = raw.find("]")
        if close < 0 or raw[close + 1 : close + 2] != ":":
            raise HttpSetupError(f"--http {text!r}: expected [IPV6]:PORT, e.g. [::1]:8765")
        host, port_text = raw[1:close], raw[close + 2 :]
    else:
        host, sep, port_text = raw.rpartition(":")
        if not sep or not host or ":" in host:
            raise HttpSetupError(f"--http {text!r}: expected HOST:PORT, e.g. 127.0.0.1:8765 (IPv6 as [::1]:8765)")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise HttpSetupError(f"--http {text!r}: the port must be a number from 0 to 65535")
    if host != "localhost":
        try:
            host = str(ipaddress.ip_address(host))
        except ValueError:
            raise HttpSetupError(
                f"--http {text!r}: HOST must be an IP address or localhost (a name could resolve anywhere)"
            ) from None
    return Bind(host, int(port_text))


def read_token(path: str | os.PathLike[str]) -> bytes:
    """The bearer token in ``path`` (surrounding whitespace stripped), or HttpSetupError saying why not."""
    where = f"--token-file {os.fspath(path)}"
    try:
        data = read_private(path, MAX_TOKEN_BYTES, what="a token file (one line)", secret=True)
    except Unreadable as exc:
        raise HttpSetupError(
            f"{where}: {exc.why}" + (" (the server never starts without a token)" if exc.os_error else "")
        ) from None
    if data is None:
        raise HttpSetupError(f"{where}: No such file or directory (the server never starts without a token)")
    token = data.strip()
    if not token:
        raise HttpSetupError(f"{where}: empty (the server never starts without a token)")
    if any(b < 0x21 or b > 0x7E for b in token):
        raise HttpSetupError(f"{where}: the token must be one line of printable ASCII without spaces")
    if len(token) < MIN_TOKEN_CHARS:
        raise HttpSetupError(
            f"{where}: the token has {len(token)} characters, fewer than {MIN_TOKEN_CHARS} "
            "(e.g. `python3 -c 'import secrets; print(secrets.token_urlsafe(32))'`)"
        )
    return token


# ------------------------------------------------------------------------------------------------
# The guard in front of the SDK's app (pure ASGI)


def _headers(scope: Scope) -> dict[bytes, list[bytes]]:
    found: dict[bytes, list[bytes]] = {}
    for name, value in scope.get("headers", ()):
        found.setdefault(bytes(name).lower(), []).append(bytes(value))
    return found


def check_request(headers: dict[bytes, list[bytes]], *, bind: Bind, token: bytes) -> tuple[int, str] | None:
    """None when the request may pass, else (HTTP status, reason). Pure."""
    hosts = headers.get(b"host", [])
    if len(hosts) != 1 or hosts[0].decode("latin-1").lower() != bind.authority.lower():
        return 421, f"Host must be {bind.authority}"
    origins = headers.get(b"origin", [])
    if len(origins) > 1 or (origins and origins[0].decode("latin-1").lower() != f"http://{bind.authority}".lower()):
        return 403, f"Origin must be absent or http://{bind.authority}"
    auth = headers.get(b"authorization", [])
    scheme, _, presented = auth[0].partition(b" ") if len(auth) == 1 else (b"", b"", b"")
    # compare_digest runs in time independent of where the bytes differ (length still shows)
    if not (scheme.lower() == b"bearer" and hmac.compare_digest(presented.strip(), token)):
        return 401, "a valid Authorization: Bearer token is required"
    return None


class Guard:
    """ASGI middleware: Host, Origin and bearer token (see the module docstring); lifespan passes."""

    def __init__(self, app: ASGIApp, *, bind: Bind, token: bytes) -> None:
        self.app, self.bind, self._token = app, bind, token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        refused = check_request(_headers(scope), bind=self.bind, token=self._token)
        if refused is None:
            await self.app(scope, receive, send)
            return
        status, reason = refused
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        log.warning("refused an HTTP request from %s: %d %s", _peer(scope), status, reason)
        body = (reason + "\n").encode()
        headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
        if status == 401:
            headers.append((b"www-authenticate", b'Bearer realm="tooldir"'))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _peer(scope: Scope) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "?"


# ------------------------------------------------------------------------------------------------
# Bounded connections (serve:starve)


def raise_descriptor_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit; (before, after) soft values."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if target > soft:
        for value in (target, 1 << 20, 1 << 16):  # the kernel's nr_open may be below an infinite hard limit
            if soft < value <= target:
                try:
                    resource.setrlimit(resource.RLIMIT_NOFILE, (value, hard))
                except (ValueError, OSError):
                    continue
                return soft, value
    return soft, soft


def connection_cap(soft_nofile: int) -> int:
    """Open connections allowed with ``soft_nofile`` descriptors: :data:`MAX_CONNECTIONS`, less
    when fewer than that are left beyond :data:`FD_RESERVE` (never below :data:`MIN_CONNECTIONS`)."""
    return max(MIN_CONNECTIONS, min(MAX_CONNECTIONS, soft_nofile - FD_RESERVE))


class ConnectionLimiter:
    """The open connections, oldest first, at most ``cap``. Pure bookkeeping (the event loop's
    thread only): :meth:`admit` a new one, making room by naming the oldest that is not being
    served (``busy`` false) to close; :meth:`release` one that closed."""

    def __init__(self, cap: int) -> None:
        if cap < 1:
            raise ValueError("cap must be >= 1")
        self.cap = cap
        self._open: OrderedDict[int, Any] = OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    def admit(self, conn: Any, busy: Callable[[Any], bool]) -> tuple[bool, Any]:
        """(admitted, the connection to close to make room or None). Not admitted: every open
        connection is being served."""
        if len(self._open) < self.cap:
            self._open[id(conn)] = conn
            return True, None
        victim = next((c for c in self._open.values() if not busy(c)), None)
        if victim is None:
            return False, None
        del self._open[id(victim)]
        self._open[id(conn)] = conn
        return True, victim

    def release(self, conn: Any) -> None:
        self._open.pop(id(conn), None)


def guarded_protocol(limiter: ConnectionLimiter, *, deadline_s: float = REQUEST_DEADLINE_S) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with the connection bound of ``limiter`` and a whole-request deadline."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    complete = (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.ERROR)

    def busy(conn: Any) -> bool:
        return bool(conn.cycle is not None and not conn.cycle.response_complete)

    class GuardedH11(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            admitted, victim = limiter.admit(self, busy)
            if victim is not None:
                log.warning(
                    "%d HTTP connections open (the limit): closed the oldest one not being served, from %s",
                    limiter.cap,
                    _addr(victim.client),
                )
                victim.transport.close()
            if not admitted:
                log.warning(
                    "refused an HTTP connection from %s: all %d open connections are being served",
                    _addr(self.client),
                    limiter.cap,
                )
                transport.close()
                return
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._deadline is None and self.conn.their_state is h11.IDLE:
                self._arm()  # the first byte of the next request on a kept-alive connection
            super().data_received(data)
            if self.conn.their_state in complete:
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            limiter.release(self)
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(deadline_s, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            if self.transport.is_closing() or self.conn.their_state in complete:
                return
            log.warning(
                "closed the HTTP connection from %s: its request had not arrived whole within %g s",
                _addr(self.client),
                deadline_s,
            )
            if self.cycle is None:  # no response begun: say why
                with contextlib.suppress(OSError, RuntimeError):
                    self.transport.write(
                        b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    )
            self.transport.close()

    return GuardedH11


class QuietDisconnects(logging.Filter):
    """A client that went away before its request body arrived (or that the request deadline
    closed) is one line, not the SDK's traceback (attached to the SDK's HTTP transport logger)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and type(exc).__name__ == "ClientDisconnect":
            record.msg, record.args = "%s: the client disconnected before its request had arrived", (record.msg,)
            record.exc_info = record.exc_text = None
        return True


def _addr(client: Any) -> str:
    return f"{client[0]}:{client[1]}" if client else "?"


_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class AcceptGuard:
    """The event loop's exception handler while serving HTTP. A failed ``accept()`` out of
    descriptors is one rate-limited line, never a traceback, and never a busy loop: asyncio (3.11)
    retries ``accept()`` up to the backlog in the same tick, failing and scheduling a retry each
    time, while the connections wait in the queue. So a spare descriptor is held, and on EMFILE
    it is let go to accept the waiting connections and close them at once (their clients see the
    connection closed rather than hang), then taken again on the next tick. Anything else: one line (the
    traceback at debug level)."""

    def __init__(self, listener: socket.socket) -> None:
        self.listener = listener
        self.dropped = 0
        self._spare: int | None = self._take()

    @staticmethod
    def _take() -> int | None:
        try:
            return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in _OUT_OF_RESOURCES:
            dropped = self._drop_waiting()
            # taken again only on the next tick: until then asyncio's own next accept() finds the
            # descriptor free and the queue empty, and stops (it fails again at once otherwise)
            loop.call_soon(self._retake)
            log.warning(
                "cannot accept HTTP connections: %s; closed %d waiting connection(s) (out of descriptors)",
                exc.strerror or exc,
                dropped,
            )
            return
        log.error("event loop: %s: %s", context.get("message", "unhandled exception"), exc)
        if exc is not None:
            log.debug("event loop exception", exc_info=exc)

    def _drop_waiting(self) -> int:
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None
        dropped = 0
        for _ in range(LISTEN_BACKLOG):
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                break
            except OSError:  # still none free (the whole system is out): asyncio retries in 1 s
                break
            conn.close()
            dropped += 1
        self.dropped += dropped
        return dropped

    def _retake(self) -> None:
        if self._spare is None:
            self._spare = self._take()

    def close(self) -> None:
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None


# ------------------------------------------------------------------------------------------------
# list_changed to every HTTP client


MAX_NOTIFIED_CONNECTIONS = 1024


def many_clients_notifier() -> Any:
    """A :class:`tooldir.mcp.server.ListChangedNotifier` for many connections: over stdio there is
    one client, over HTTP every handshake-era client must get ``tools/list_changed`` (they share
    one tooldir session, so one client's ``tool_search`` changes every client's list)."""
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
    from mcp.server.session import ServerSession
    from mcp.server.subscriptions import ToolsListChanged
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    from .server import ListChangedNotifier

    class ManyClients(ListChangedNotifier):
        def __init__(self) -> None:
            super().__init__()
            # connection -> the latest request's session (its standalone channel is the connection's);
            # the SDK has no public connection handle, so the session's own is used when present
            self._sessions: dict[int, ServerSession] = {}

        async def observe(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
            if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS and ctx.method != "initialize":
                key = id(getattr(ctx.session, "_connection", ctx.session))
                self._sessions.pop(key, None)
                self._sessions[key] = ctx.session
                while len(self._sessions) > MAX_NOTIFIED_CONNECTIONS:  # oldest first
                    self._sessions.pop(next(iter(self._sessions)))
            return await call_next(ctx)

        async def tools_changed(self) -> None:
            await self.bus.publish(ToolsListChanged())
            for key, session in list(self._sessions.items()):
                try:
                    await session.send_tool_list_changed()
                except Exception as exc:  # that client went away: stop notifying it
                    log.debug("could not send tools/list_changed: %s", exc)
                    self._sessions.pop(key, None)

    return ManyClients()


# ------------------------------------------------------------------------------------------------
# The I/O edge


async def serve_http(
    config: Any,
    *,
    bind: Bind,
    token: bytes,
    allow_remote: bool = False,
    watch: bool = True,
    policy_file: str | os.PathLike[str] | None = None,
    turn_idle_s: float | None = None,
    on_ready: Callable[[Bind], None] | None = None,
) -> None:
    """Serve MCP over Streamable HTTP at ``bind.url`` until SIGTERM/SIGINT.

    Raises:
        HttpSetupError: a non-loopback address without ``allow_remote``, or the port is taken.
        ToolDirError: the roots, state or policy could not be loaded.
    """
    import anyio
    import anyio.to_thread
    import uvicorn
    from anyio.from_thread import BlockingPortal
    from mcp.server.lowlevel import NotificationOptions
    from mcp.server.transport_security import TransportSecuritySettings

    from .server import DEFAULT_TURN_IDLE_S, ToolServer, build_server

    class _GracefulServer(uvicorn.Server):
        """SIGINT/SIGTERM end serving gracefully and ``serve_http`` returns (so the session is
        closed and the exit code is 0); uvicorn's own handling would re-raise the signal after
        shutting down, killing the process before tooldir closes its session."""

        stopped_by: int | None = None

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return

            def stop(signum: int, frame: Any) -> None:
                if self.should_exit:  # a second signal: stop waiting for open requests
                    self.force_exit = True
                self.stopped_by = signum
                self.should_exit = True

            previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    if not bind.is_loopback():
        if not allow_remote:
            raise HttpSetupError(
                f"--http {bind.authority}: not a loopback address; pass --unsafe-http-remote to serve other "
                "hosts (anyone who can reach the port and holds the token runs your tools)"
            )
        log.warning("serving MCP over HTTP on a non-loopback address %s (--unsafe-http-remote)", bind.authority)
    try:  # bound here, so a taken port is a clear error and port 0 becomes a known one
        family = socket.AF_INET6 if ":" in bind.host else socket.AF_INET
        listener = socket.create_server((bind.host, bind.port), family=family)
    except OSError as exc:
        raise HttpSetupError(f"--http {bind.authority}: cannot listen there: {exc.strerror or exc}") from None
    bind = Bind(bind.host, listener.getsockname()[1])
    before, soft = raise_descriptor_limit()
    if soft != before:
        log.info("raised the soft descriptor limit (RLIMIT_NOFILE) from %d to %d", before, soft)
    limiter = ConnectionLimiter(connection_cap(soft))
    log.info(
        "HTTP limits: %d open connections, a whole request within %g s, idle connections closed after %d s",
        limiter.cap,
        REQUEST_DEADLINE_S,
        KEEP_ALIVE_S,
    )
    idle = DEFAULT_TURN_IDLE_S if turn_idle_s is None else turn_idle_s
    try:
        front = await anyio.to_thread.run_sync(
            lambda: ToolServer.open(config, watch=watch, policy_file=policy_file, turn_idle_s=idle)
        )
    except BaseException:
        listener.close()
        raise
    try:
        async with BlockingPortal() as portal:
            front.notifier = many_clients_notifier()
            front.attach(portal)
            server = build_server(front)
            # handshake-era sessions read their capabilities from here: announce tools/list_changed
            server.create_initialization_options = partial(  # type: ignore[method-assign]
                server.create_initialization_options, NotificationOptions(tools_changed=True)
            )
            security = TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=[bind.authority],
                allowed_origins=[f"http://{bind.authority}"],
            )
            app = server.streamable_http_app(streamable_http_path=MCP_PATH, transport_security=security, host=bind.host)
            guarded = Guard(app, bind=bind, token=token)
            uv = _GracefulServer(
                uvicorn.Config(
                    guarded,
                    host=bind.host,
                    port=bind.port,
                    lifespan="on",
                    log_config=None,
                    access_log=False,
                    server_header=False,
                    timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,  # open event streams never hold a stop
                    ws="none",
                    http=guarded_protocol(limiter),
                    timeout_keep_alive=KEEP_ALIVE_S,
                    backlog=LISTEN_BACKLOG,
                )
            )
            loop = asyncio.get_running_loop()
            previous_handler = loop.get_exception_handler()
            accept_guard = AcceptGuard(listener)
            loop.set_exception_handler(accept_guard)
            quiet = QuietDisconnects()
            sdk_log = logging.getLogger("mcp.server.streamable_http")
            sdk_log.addFilter(quiet)

            async def announce() -> None:
                while not uv.started:
                    if uv.should_exit:
                        return
                    await anyio.sleep(0.02)
                log.info("serving MCP over HTTP at %s", bind.url)
                if on_ready is not None:
                    on_ready(bind)

            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(announce)
                    await uv.serve(sockets=[listener])
                    tg.cancel_scope.cancel()
            finally:
                loop.set_exception_handler(previous_handler)
                accept_guard.close()
                sdk_log.removeFilter(quiet)
            if uv.stopped_by is not None:
                log.info("signal %s: shut down cleanly", signal.Signals(uv.stopped_by).name)
    finally:
        listener.close()
        front.close()
