"""``tooldir serve``: the tools of a tooldir session offered to any MCP client.

One MCP connection is one :class:`~tooldir.session.Session`. ``tools/list`` returns the session's
working set (eager tools, loaded deferred tools and the guard tool ``tool_search``);
``tools/call`` runs through the session and the registry pipeline (session checks, validation,
permission, hooks, sandbox, audit). Whenever the working set changes - ``tool_search`` loaded
tools, tools were re-deferred, or the watcher published a snapshot that changes what the session
offers - the client gets ``notifications/tools/list_changed``:

* on handshake-era connections (``initialize``; 2025 protocol versions) on the connection itself;
* on 2026-07-28 connections through the ``subscriptions/listen`` streams the client opened.

Tool failures are ``isError`` results carrying the tooldir error code, never protocol errors.

The pieces in the middle are pure (:func:`mcp_tool`, :func:`tool_annotations`,
:func:`call_tool_result`); :class:`ToolServer` holds the session and the notifier;
:func:`build_server` wires them into the SDK's low-level ``Server``; :func:`serve_stdio` is the
I/O edge. While serving, the SDK's stdio transport points file descriptor 1 at stderr, so
nothing but protocol messages can reach the client's stdout pipe.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ToolsListChanged
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .model import Risk

log = logging.getLogger("tooldir.serve")

SERVER_NAME = "tooldir"
AUDIT_META_KEY = "tooldir/audit_id"
ERROR_META_KEY = "tooldir/error_code"

#: MCP tool names (2025-11-25 spec): 1-128 characters from this set. tooldir's own names are stricter.
MCP_TOOL_NAME = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


# ------------------------------------------------------------------------------------------------
# Pure conversions


@dataclass(frozen=True, slots=True)
class RiskHints:
    read_only: bool
    destructive: bool
    open_world: bool


#: Risk levels as MCP behaviour hints. Hints never understate the danger: anything that may
#: write is marked destructive (nothing tells us a write is additive or idempotent), anything
#: that reaches outside the machine is open-world, and ``exec`` is all three.
RISK_HINTS: Mapping[Risk, RiskHints] = {
    Risk.READ: RiskHints(read_only=True, destructive=False, open_world=False),
    Risk.WRITE: RiskHints(read_only=False, destructive=True, open_world=False),
    Risk.EXTERNAL_READ: RiskHints(read_only=True, destructive=False, open_world=True),
    Risk.EXTERNAL_WRITE: RiskHints(read_only=False, destructive=True, open_world=True),
    Risk.EXEC: RiskHints(read_only=False, destructive=True, open_world=True),
}

#: The guard tool only searches and loads tool definitions into this session.
GUARD_HINTS = RiskHints(read_only=True, destructive=False, open_world=False)


def tool_annotations(risk: Risk | None, *, title: str | None = None) -> types.ToolAnnotations:
    """MCP annotations for a risk level (``None``: a guard tool that touches nothing outside the session)."""
    hints = GUARD_HINTS if risk is None else RISK_HINTS[risk]
    return types.ToolAnnotations(
        title=title,
        read_only_hint=hints.read_only,
        destructive_hint=hints.destructive,
        idempotent_hint=True if hints.read_only else None,
        open_world_hint=hints.open_world,
    )


def _plain(value: Any) -> Any:
    """A deep copy of a (possibly frozen) JSON value as plain dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def mcp_tool(name: str, description: str, input_schema: Mapping[str, Any], risk: Risk | None) -> types.Tool:
    """One tool as MCP lists it.

    Raises:
        ValueError: the name is not a valid MCP tool name or the schema is not an object schema
            (the loader never lets such a tool through; this is a last check at the boundary).
    """
    if not MCP_TOOL_NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a valid MCP tool name")
    schema = _plain(input_schema)
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise ValueError(f"the input schema of {name!r} is not a JSON Schema of type object")
    meta = {"tooldir/risk": str(risk)} if risk is not None else None
    return types.Tool(
        name=name,
        description=description,
        input_schema=schema,
        annotations=tool_annotations(risk),
        _meta=meta,
    )


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False, sort_keys=True)


def call_tool_result(
    *,
    ok: bool,
    content: Any,
    error_code: str | None = None,
    error_message: str | None = None,
    audit_id: str | None = None,
) -> types.CallToolResult:
    """A tooldir call outcome as an MCP result: failures are ``isError`` results whose text starts
    with ``error[<code>]`` and whose structured content is ``{"error": {"code", "message"}}``."""
    meta: dict[str, Any] = {}
    if audit_id is not None:
        meta[AUDIT_META_KEY] = audit_id
    if ok:
        structured = _plain(content) if isinstance(content, Mapping) else None
        text = _text(_plain(content)) if content is not None else ""
        return types.CallToolResult(
            content=[types.TextContent(text=text)],
            structured_content=structured,
            is_error=False,
            _meta=meta or None,
        )
    code = error_code or "tool-error"
    message = error_message or "the tool failed"
    meta[ERROR_META_KEY] = code
    return types.CallToolResult(
        content=[types.TextContent(text=f"error[{code}]: {message}")],
        structured_content={"error": {"code": code, "message": message}},
        is_error=True,
        _meta=meta,
    )


def tools_fingerprint(tools: Sequence[types.Tool]) -> tuple[tuple[str, str], ...]:
    """What a client would see of a tool list, cheap to compare: (name, schema+text digest) pairs."""
    return tuple(sorted((t.name, _digest_tool(t)) for t in tools))


def _digest_tool(tool: types.Tool) -> str:
    return json.dumps(
        [tool.description, tool.input_schema, tool.annotations.model_dump() if tool.annotations else None],
        sort_keys=True,
        ensure_ascii=False,
    )


# ------------------------------------------------------------------------------------------------
# list_changed delivery, both protocol eras


class ListChangedNotifier:
    """Sends ``notifications/tools/list_changed`` to the client of this connection.

    The SDK serves two protocol eras on one stdio pipe. On handshake-era connections the
    notification goes on the connection's standalone channel, reached through the session of any
    request after ``initialize``; the middleware :meth:`observe` captures it. On 2026-07-28
    connections change notifications only travel on ``subscriptions/listen`` streams, fed from
    :attr:`bus` (served by the SDK's ``ListenHandler``).
    """

    def __init__(self) -> None:
        self.bus = InMemorySubscriptionBus()
        self._legacy: ServerSession | None = None
        self.sent = 0

    async def observe(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Server middleware: remember the handshake-era channel once the handshake is done."""
        if self._legacy is None and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS and ctx.method != "initialize":
            self._legacy = ctx.session
        return await call_next(ctx)

    async def tools_changed(self) -> None:
        self.sent += 1
        await self.bus.publish(ToolsListChanged())
        if self._legacy is not None:
            try:
                await self._legacy.send_tool_list_changed()
            except Exception as exc:  # the client went away mid-send; the read loop ends the server
                log.debug("could not send tools/list_changed: %s", exc)


# ------------------------------------------------------------------------------------------------
# The server
