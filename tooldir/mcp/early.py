"""``tooldir serve`` answers the client's ``initialize`` before the MCP SDK is imported.

Importing the SDK's server takes about a second (its message types alone a third of that), and
loading a large tool root takes longer. Neither is needed to answer ``initialize``, so ``tooldir
serve`` does not make the client wait for them:

1. :func:`claim_wire` takes the protocol stream off file descriptors 0 and 1 (fd 0 then reads the
   null device and fd 1 writes to stderr, as the SDK's own stdio transport does while serving);
2. :meth:`Wire.answer_opening` reads the first line and, when it is a handshake ``initialize`` of
   the plain shape :func:`early_answer` accepts, answers it at once with :func:`initialize_result`:
   the result the SDK's server gives (tests/mcp/test_mcp_early.py compares the two for every
   protocol version, and checks that the SDK's own validators accept every request this module
   answers);
3. the SDK then serves the stream (:func:`tooldir.mcp.stdio.guarded_stdio`): the first line is
   replayed to it, so it commits the handshake as usual, and its own answer to the request
   answered early is not sent a second time.

Anything else on the first line (another method, a 2026-07-28 request, parameters of any other
shape, malformed JSON) is left to the SDK unchanged: it is only answered later. Standard library
only: nothing here may import the SDK, pydantic or the rest of tooldir.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import FrameType
from typing import IO, Any, NoReturn

log = logging.getLogger("tooldir.mcp")

#: Longest line (one JSON-RPC message) read; the rest of a longer line is discarded unread.
MAX_LINE = 16 << 20

SERVER_NAME = "tooldir"
INSTRUCTIONS = (
    "Tools from tooldir directories. Only part of the catalogue is listed at first: call tool_search "
    "with keywords or exact names to find and load more tools; loaded tools then appear in tools/list "
    "(a tools/list_changed notification is sent). Failed calls return isError results whose text starts "
    "with error[<code>]."
)
#: What ``tooldir serve``'s server advertises on handshake-era connections (tools, with list_changed).
HANDSHAKE_CAPABILITIES: dict[str, Any] = {"tools": {"listChanged": True}}
#: ``mcp_types.version.HANDSHAKE_PROTOCOL_VERSIONS`` of the SDK tooldir is tested with (a test keeps
#: them equal): the versions the SDK negotiates as asked; any other gets the last one.
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")


def server_version() -> str:
    """tooldir's installed version, as ``serverInfo.version`` reports it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tooldir")
    except PackageNotFoundError:
        return "0"


def initialize_result(requested: str) -> dict[str, Any]:
    """The ``initialize`` result ``tooldir serve``'s server gives a client asking for protocol
    version ``requested`` (the SDK's negotiation: that version if it is a handshake-era version
    the SDK speaks, else the latest handshake-era one)."""
    negotiated = requested if requested in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1]
    return {
        "capabilities": json.loads(json.dumps(HANDSHAKE_CAPABILITIES)),
        "instructions": INSTRUCTIONS,
        "protocolVersion": negotiated,
        "serverInfo": {"name": SERVER_NAME, "title": "tooldir", "version": server_version()},
    }


def _text(value: Any) -> bool:
    """A JSON string UTF-8 can encode (no lone surrogate, which the SDK's parser refuses)."""
    if not isinstance(value, str):
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate key")
    return dict(pairs)


def _plain_capabilities(value: Any) -> bool:
    """Client capabilities of the plain shape: ``roots`` ({} or ``listChanged`` a boolean),
    ``sampling`` and ``elicitation`` ({}), ``experimental`` (objects by name); nothing else."""
    if not isinstance(value, dict):
        return False
    for key, member in value.items():
        if not isinstance(member, dict):
            return False
        if key == "roots":
            if not (set(member) <= {"listChanged"} and all(type(v) is bool for v in member.values())):
                return False
        elif key in ("sampling", "elicitation"):
            if member:
                return False
        elif key == "experimental":
            if not all(_text(k) and isinstance(v, dict) for k, v in member.items()):
                return False
        else:
            return False
    return True


def early_answer(raw: bytes) -> dict[str, Any] | None:
    """The response to ``raw`` when it is a handshake ``initialize`` request of the plain shape
    real clients send: exactly ``jsonrpc`` "2.0", an integer or string ``id``, ``method`` and
    ``params`` with exactly ``protocolVersion`` (a string), ``clientInfo`` (``name``, ``version`` and
    optionally ``title``, all strings) and ``capabilities`` (see :func:`_plain_capabilities`). None for
    anything else, which only the SDK answers. Never raises."""
    if len(raw) > MAX_LINE:
        return None
    try:
        message = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or set(message) != {"jsonrpc", "id", "method", "params"}:
        return None
    request_id, params = message["id"], message["params"]
    if message["jsonrpc"] != "2.0" or message["method"] != "initialize":
        return None
    if not (type(request_id) is int or _text(request_id)):
        return None
    if not isinstance(params, dict) or set(params) != {"protocolVersion", "capabilities", "clientInfo"}:
        return None
    info = params["clientInfo"]
    if not (isinstance(info, dict) and {"name", "version"} <= set(info) <= {"name", "version", "title"}):
        return None
    if not all(_text(v) for v in info.values()) or not _text(params["protocolVersion"]):
        return None
    if not _plain_capabilities(params["capabilities"]):
        return None
    return {"jsonrpc": "2.0", "id": request_id, "result": initialize_result(params["protocolVersion"])}


def read_wire_line(wire: IO[bytes]) -> bytes:
    """One line (one message) of at most :data:`MAX_LINE` + 1 bytes; the rest of a longer line is
    discarded unread (bounded memory)."""
    raw = wire.readline(MAX_LINE + 1)
    if len(raw) > MAX_LINE and not raw.endswith(b"\n"):
        while True:
            more = wire.readline(1 << 20)
            if not more or more.endswith(b"\n"):
                break
    return raw


class Unset:
    """No request was answered early."""


_UNSET = Unset()


@dataclass
class Wire:
    """The protocol stream, on private descriptors: file descriptor 0 reads the null device and
    fd 1 writes to stderr until :meth:`restore`. ``replay``: lines read before the SDK serves;
    ``answered``: the id of the request already answered (the SDK's answer to it is not sent)."""

    reader: IO[bytes]
    writer: IO[bytes]
    _restore: Callable[[], None]
    replay: tuple[bytes, ...] = ()
    answered: int | str | Unset = field(default=_UNSET)

    def answer_opening(self, *, early: bool = True) -> None:
        """Read the first line; answer it now if :func:`early_answer` can (and ``early``), and keep
        it for the SDK either way."""
        raw = read_wire_line(self.reader)
        self.replay = (raw,) if raw else ()
        answer = early_answer(raw) if raw and early else None
        if answer is None:
            return
        self.writer.write(json.dumps(answer, ensure_ascii=False, separators=(",", ":")).encode() + b"\n")
        self.writer.flush()
        self.answered = answer["id"]
        log.debug("answered initialize (id %r) before the SDK was imported", answer["id"])

    def restore(self) -> None:
        self._restore()


def _claim(fd: int, divert: Callable[[], int]) -> tuple[int, Callable[[], None]] | None:
    """A private duplicate of ``fd`` (close-on-exec, above the standard range) with ``fd`` pointed at
    ``divert()``, and how to undo that; None when descriptors cannot be moved (serve in place)."""
    try:
        private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    except OSError:
        return None
    try:
        diversion = divert()
        try:
            os.dup2(diversion, fd)
        finally:
            os.close(diversion)
    except OSError:
        os.close(private)
        return None

    def restore() -> None:
        with contextlib.suppress(OSError):
            os.dup2(private, fd)  # private stays open: a reader thread may still block on it

    return private, restore


def _divert_stdout() -> int:
    try:
        return os.dup(2)
    except OSError:
        return os.open(os.devnull, os.O_WRONLY)


def claim_wire() -> Wire:
    """The protocol stream on private descriptors, fd 0 pointed at the null device and fd 1 at
    stderr (so neither handlers nor child processes can read or write the protocol stream). Best
    effort like the SDK's own claim: a descriptor that cannot be moved is used in place."""
    restores: list[Callable[[], None]] = []
    stdin = _claim(0, lambda: os.open(os.devnull, os.O_RDONLY))
    if stdin is None:
        reader: IO[bytes] = sys.stdin.buffer
    else:
        reader = os.fdopen(stdin[0], "rb", closefd=False)
        restores.append(stdin[1])
    sys.stdout.flush()
    stdout = _claim(1, _divert_stdout)
    if stdout is None:
        writer: IO[bytes] = sys.stdout.buffer
    else:
        writer = os.fdopen(stdout[0], "wb", closefd=False)
        restores.append(stdout[1])

    def restore() -> None:
        for undo in reversed(restores):
            undo()

    return Wire(reader, writer, restore)


def exit_on_early_signal(signum: int, frame: FrameType | None) -> NoReturn:
    """SIGTERM/SIGINT before the server's loop handles signals: shut down cleanly, as it does."""
    name = signal.Signals(signum).name
    serve_log = logging.getLogger("tooldir.serve")
    serve_log.info("signal %s: shutting down", name)
    serve_log.info("signal %s; shut down cleanly", name)
    logging.shutdown()
    os._exit(0)


def any_server_package(roots: Iterable[str | os.PathLike[str]]) -> bool:
    """Whether a tool root holds an MCP server package (a ``<root>/<name>/server.json``; DESIGN
    §10): then ``initialize`` waits for the load, since its instructions carry those of the
    trusted servers. Only a hint for when to answer (one lstat per package, no file is read; the
    loader decides what the packages are). A root that cannot be listed says no."""
    for root in roots:
        try:
            with os.scandir(root) as entries:
                for entry in entries:
                    if entry.name.startswith("."):
                        continue
                    try:
                        os.lstat(os.path.join(entry.path, "server.json"))
                    except OSError:
                        continue
                    return True
        except OSError:
            continue
    return False
