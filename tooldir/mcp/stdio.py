"""The stdio edge of ``tooldir serve``: every line a client sends gets an answer or is a notification.

The SDK's stdio reader hands a line it cannot parse (invalid JSON, nesting past its parser's
recursion limit, a lone surrogate escape, ``params`` that is not an object) to the server as an
exception, and the server answers nothing: the client waits forever for that request. So lines go
through :func:`classify` first, which lets through exactly what the SDK's own parser accepts and
answers the rest with a JSON-RPC error:

==========  ====================================================================================
``-32700``  parse error: not JSON, nested too deeply to parse, or larger than :data:`MAX_LINE`
            bytes (``id`` null, unless the request's leading flat fields name it)
``-32600``  invalid request: JSON, but not a JSON-RPC 2.0 request (no or bad ``id``/``method``,
            a batch array; also an ``id`` that is neither an integer nor a string, which the SDK
            would silently read as a notification); ``id`` null when it cannot be read
``-32602``  invalid params: a well-formed request envelope whose content the SDK refuses (nested
            too deeply, a lone surrogate, ``params`` of the wrong type); answered with its ``id``
==========  ====================================================================================

Notifications and responses from the client that do not parse are dropped (JSON-RPC never answers
them) and logged. :func:`guarded_stdio` replaces the SDK's stdin handling with this reader and keeps
its guarantee: while serving, file descriptor 0 reads the null device, so neither handlers nor
child processes can read the protocol stream.

The protocol stream may have been claimed, and its first line answered, before the SDK was
imported (:mod:`tooldir.mcp.early`): :func:`guarded_stdio` then replays that line to the SDK
and does not send the SDK's answer to a request answered early a second time.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
from collections import deque
from collections.abc import AsyncIterator
from typing import IO, Any, cast

import anyio
import anyio.to_thread
import mcp_types as types

from .early import _UNSET, MAX_LINE, Unset, Wire, claim_wire, read_wire_line

log = logging.getLogger("tooldir.mcp")

_MESSAGE_MAX = 200

PARSE_ERROR = types.PARSE_ERROR
INVALID_REQUEST = types.INVALID_REQUEST
INVALID_PARAMS = types.INVALID_PARAMS

_STRING = r'"(?:[^"\\]|\\.)*"'
_SCALAR = rf"(?:{_STRING}|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null)"
#: ``{"jsonrpc": "2.0", "id": 7, "method": "tools/call", `` - the flat fields before the first nested
#: value, readable without parsing (or recursing into) the rest of the line.
_FLAT_HEAD = re.compile(rf"\s*\{{(?:\s*{_STRING}\s*:\s*{_SCALAR}\s*,)*")


def _error(request_id: int | str | None, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message[:_MESSAGE_MAX]}}


def _valid_id(value: Any) -> int | str | None:
    """A JSON-RPC id we can echo: an integer (not a bool) or a string UTF-8 can encode."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return None
        return value
    return None


def _head_fields(text: str) -> dict[str, Any]:
    """The top-level scalar fields that precede any nested value (where clients put ``id`` and
    ``method``); {} when there are none. Bounded: one regex match and one flat parse."""
    match = _FLAT_HEAD.match(text)
    if match is None:
        return {}
    head = match.group(0).rstrip().rstrip(",")
    try:
        fields = json.loads(head + "}")
    except ValueError:
        return {}
    return fields if isinstance(fields, dict) else {}


def _sdk_reason(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            first = errors(include_url=False, include_input=False)[0]
            return str(first.get("msg", exc))
        except (IndexError, TypeError, ValueError):
            pass
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _envelope_error(value: dict[str, Any], reason: str) -> dict[str, Any] | None:
    """The answer to a JSON object the SDK refused; None for a notification or a response."""
    method = value.get("method")
    request_id = _valid_id(value.get("id"))
    if isinstance(method, str):
        if "id" not in value:
            return None  # a notification: never answered
        if request_id is None:
            return _error(None, INVALID_REQUEST, "Invalid Request: id must be an integer or a string")
        if value.get("jsonrpc") != "2.0":
            return _error(request_id, INVALID_REQUEST, 'Invalid Request: jsonrpc must be "2.0"')
        return _error(request_id, INVALID_PARAMS, f"Invalid params: {reason}")
    if "method" not in value and ("result" in value or "error" in value):
        return None  # a (malformed) response from the client: nothing to answer
    return _error(request_id, INVALID_REQUEST, "Invalid Request: no method")


def _has_id(text: str) -> bool:
    try:
        value = json.loads(text)  # the SDK parsed it already: bounded depth
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict) and "id" in value


def classify(raw: bytes) -> tuple[str | None, dict[str, Any] | None]:
    """(line for the SDK, None) when the SDK's parser accepts the line; (None, error response)
    when it does not and an answer is due; (None, None) for blank lines and unanswerable
    messages. Never raises."""
    if len(raw) > MAX_LINE:
        return None, _error(None, PARSE_ERROR, f"Parse error: message larger than {MAX_LINE} bytes")
    text = raw.decode("utf-8", "replace")  # as the SDK's reader decodes
    if not text.strip():
        return None, None
    try:
        message = types.jsonrpc_message_adapter.validate_json(text, by_name=False)
    except Exception as exc:  # pydantic's ValidationError, or anything else the SDK would swallow
        reason = _sdk_reason(exc)
    else:
        if isinstance(message, types.JSONRPCNotification) and '"id"' in text and _has_id(text):
            # a request whose id is not an integer or string would become a notification: answer it
            return None, _error(None, INVALID_REQUEST, "Invalid Request: id must be an integer or a string")
        return text, None
    try:
        value = json.loads(text)
    except RecursionError:
        head = _head_fields(text)
        request_id = _valid_id(head.get("id"))
        if request_id is not None and isinstance(head.get("method"), str):
            return None, _error(request_id, INVALID_PARAMS, "Invalid params: JSON nested too deeply")
        return None, _error(None, PARSE_ERROR, "Parse error: JSON nested too deeply")
    except ValueError as exc:
        return None, _error(None, PARSE_ERROR, f"Parse error: {exc}")
    if isinstance(value, list):
        return None, _error(None, INVALID_REQUEST, "Invalid Request: batches are not supported")
    if not isinstance(value, dict):
        return None, _error(None, INVALID_REQUEST, "Invalid Request: a message must be a JSON object")
    return None, _envelope_error(value, reason)


class GuardedLines:
    """An async iterator of the lines the SDK may parse, read from ``wire`` (after the lines of
    ``replay``, already read); every other line is answered on the write stream given to
    :meth:`attach` (or dropped, see :func:`classify`)."""

    def __init__(self, wire: IO[bytes], replay: tuple[bytes, ...] = ()) -> None:
        self._wire = wire
        self._replay = deque(replay)
        self._write: Any = None
        self._attached = anyio.Event()

    def attach(self, write_stream: Any) -> None:
        self._write = write_stream
        self._attached.set()

    def __aiter__(self) -> GuardedLines:
        return self

    async def __anext__(self) -> str:
        while True:
            if self._replay:
                raw = self._replay.popleft()
            else:
                raw = await anyio.to_thread.run_sync(self._read_line, abandon_on_cancel=True)
            if not raw:
                raise StopAsyncIteration
            line, answer = classify(raw)
            if line is not None:
                return line
            if answer is not None:
                await self._answer(answer)
            else:
                log.warning("dropped an unparseable notification or response from the client")

    def _read_line(self) -> bytes:
        return read_wire_line(self._wire)

    async def _answer(self, answer: dict[str, Any]) -> None:
        from mcp.shared.message import SessionMessage

        error = answer["error"]
        log.warning("answered a malformed message with JSON-RPC error %s: %s", error["code"], error["message"])
        await self._attached.wait()
        message = types.JSONRPCError.model_validate(answer)
        await self._write.send(SessionMessage(message))


class _Unowned(io.TextIOWrapper):
    """A text layer whose close (at garbage collection too) never closes the buffer under it: the
    buffer may be ``sys.stdout``'s own (the SDK's transport does the same)."""

    def close(self) -> None:
        with contextlib.suppress(ValueError):
            self.detach()


class _WireOut:
    """The SDK's stdout writer's file (``write`` one message and its newline, ``flush``) over the
    claimed descriptor; drops the SDK's answer to the request answered early, once."""

    def __init__(self, wire: Wire) -> None:
        self._file = anyio.wrap_file(_Unowned(wire.writer, encoding="utf-8"))
        self._drop = wire.answered

    async def write(self, text: str) -> int:
        if not isinstance(self._drop, Unset) and self._answers_dropped(text):
            self._drop = _UNSET
            return len(text)
        return await self._file.write(text)

    async def flush(self) -> None:
        await self._file.flush()

    def _answers_dropped(self, text: str) -> bool:
        try:
            message = json.loads(text)
        except ValueError:
            return False
        return (
            isinstance(message, dict)
            and "method" not in message
            and ("result" in message or "error" in message)
            and type(message.get("id")) is type(self._drop)
            and message.get("id") == self._drop
        )


@contextlib.asynccontextmanager
async def guarded_stdio(wire: Wire | None = None) -> AsyncIterator[tuple[Any, Any]]:
    """``mcp.server.stdio.stdio_server`` over ``wire`` (claimed here when None), with stdin read
    through :class:`GuardedLines`."""
    from mcp.server.stdio import stdio_server

    own = wire is None
    claimed = claim_wire() if wire is None else wire
    lines = GuardedLines(claimed.reader, claimed.replay)
    try:
        async with stdio_server(
            stdin=cast("anyio.AsyncFile[str]", lines), stdout=cast("anyio.AsyncFile[str]", _WireOut(claimed))
        ) as (read_stream, write_stream):
            lines.attach(write_stream)
            yield read_stream, write_stream
    finally:
        if own:
            claimed.restore()
