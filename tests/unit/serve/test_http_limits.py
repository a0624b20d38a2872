"""serve:starve, the pieces of the HTTP front's limits: the connection bound and who makes room,
the cap from the descriptor limit, the raised soft limit, the accept() guard out of descriptors
(no traceback, no busy loop) and the rate-limited log."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tooldir._internal.ratelog import RateLimitFilter
from tooldir.mcp.http import FD_RESERVE, MAX_CONNECTIONS, MIN_CONNECTIONS, ConnectionLimiter, connection_cap

REPO = Path(__file__).resolve().parents[3]


class Conn:
    def __init__(self, name: str, busy: bool = False) -> None:
        self.name, self.busy = name, busy


def _busy(conn: Conn) -> bool:
    return conn.busy


def test_a_full_limiter_makes_room_by_closing_the_oldest_connection_not_being_served() -> None:
    limiter = ConnectionLimiter(3)
    a, b, c = Conn("a", busy=True), Conn("b"), Conn("c")
    for conn in (a, b, c):
        assert limiter.admit(conn, _busy) == (True, None)
    owner = Conn("owner")
    assert limiter.admit(owner, _busy) == (True, b)  # a is being served: b, the oldest idle one, goes
    assert len(limiter) == 3
    later = Conn("later")
    assert limiter.admit(later, _busy) == (True, c)
    owner.busy = later.busy = True
    assert limiter.admit(Conn("refused"), _busy) == (False, None)  # everything open is being served
    limiter.release(a)
    assert limiter.admit(Conn("next"), _busy) == (True, None)


def test_the_connection_cap_leaves_descriptors_for_everything_else() -> None:
    assert connection_cap(1024) == min(MAX_CONNECTIONS, 1024 - FD_RESERVE)
    assert connection_cap(1 << 20) == MAX_CONNECTIONS
    assert connection_cap(320) == 320 - FD_RESERVE
    assert connection_cap(64) == MIN_CONNECTIONS
    with pytest.raises(ValueError, match="cap"):
        ConnectionLimiter(0)


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60, cwd=REPO, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.stdout


def test_the_soft_descriptor_limit_is_raised_to_the_hard_one() -> None:
    out = _run(
        """
        import resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 320))
        from tooldir.mcp.http import raise_descriptor_limit
        print(raise_descriptor_limit(), resource.getrlimit(resource.RLIMIT_NOFILE))
        """
    )
    assert out.split("\n")[0] == "(64, 320) (320, 320)"


def test_accept_out_of_descriptors_closes_the_waiting_connections_in_one_line_without_a_busy_loop() -> None:
    """Every descriptor is taken; 40 clients wait in the listen queue. asyncio alone retries
    accept() up to the backlog per tick, each failure a traceback; the guard is called once per
    burst, closes the waiting connections, and the server accepts again once descriptors free."""
    out = _run(
        """
        import asyncio, logging, os, resource, socket, subprocess, sys
        from tooldir.mcp.http import AcceptGuard
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
        CLIENTS = 40
        listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        port = listener.getsockname()[1]
        child = subprocess.Popen([sys.executable, "-c", (
            "import socket, sys\\n"
            "def gone(s):\\n"
            "    try:\\n"
            "        return s.recv(1) == b''\\n"
            "    except ConnectionResetError:\\n"
            "        return True\\n"
            f"socks = [socket.create_connection(('127.0.0.1', {port})) for _ in range({CLIENTS})]\\n"
            "print('connected', flush=True)\\n"
            "print(sum(1 for s in socks if gone(s)), flush=True)\\n"  # the server closed every one
        )], stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "connected"
        guard = AcceptGuard(listener)
        calls = []
        def counted(loop, context):
            calls.append(context.get("message"))
            guard(loop, context)
        loop = asyncio.new_event_loop()  # its own descriptors first
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        filler = []
        while True:  # take every descriptor left (the guard already holds its spare)
            try:
                filler.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                break
        async def main():
            loop.set_exception_handler(counted)
            server = await loop.create_server(asyncio.Protocol, sock=listener, backlog=128)
            async with asyncio.timeout(30):
                while guard.dropped < CLIENTS:
                    await asyncio.sleep(0.01)
            server.close()
        loop.run_until_complete(main())
        for fd in filler:
            os.close(fd)
        print(child.stdout.readline().strip(), len(calls), guard.dropped)
        child.wait(30)
        """
    )
    gone, calls, dropped = out.split()
    assert gone == "40" and dropped == "40"
    assert 1 <= int(calls) <= 3  # one per burst of waiting connections, not one per accept() attempt


def _record(msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord("tooldir.serve", logging.WARNING, __file__, 1, msg, args, None)


def test_repeated_log_lines_pass_a_burst_then_are_dropped_and_counted() -> None:
    limit = RateLimitFilter(burst=3, window_s=3600)
    passed = [r for r in (_record("refused %s", f"127.0.0.1:{port}") for port in range(1000)) if limit.filter(r)]
    assert len(passed) == 3
    assert passed[-1].getMessage().endswith("[similar lines suppressed for the next 3600 s]")
    assert limit.filter(_record("another line %s", 1))  # another template is not affected
    assert limit.summary() == ["997 similar line(s) suppressed, the last: refused 127.0.0.1:999"]
    assert limit.summary() == []


def test_after_the_window_the_next_line_passes_and_says_how_many_were_dropped() -> None:
    limit = RateLimitFilter(burst=1, window_s=0.0)  # every line starts a new window
    assert limit.filter(_record("x %d", 1))
    limit._seen[("tooldir.serve", logging.WARNING, "x %d")][2] = 7  # as if 7 had been dropped meanwhile
    record = _record("x %d", 2)
    assert limit.filter(record)
    assert record.getMessage() == "x 2 [7 similar line(s) suppressed before this one]"
