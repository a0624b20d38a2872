"""``tooldir serve``: the tools of a tooldir session offered to any MCP client.

One MCP connection is one :class:`~tooldir.deferred.session.Session`. ``tools/list`` returns the session's
working set (eager tools, loaded deferred tools and the guard tool ``tool_search``), starting from
the static deferral plan that ``scan`` and ``catalog`` report (:mod:`tooldir.deferred.defer`);
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

import contextlib
import functools
import json
import logging
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import mcp_types as types
from anyio.from_thread import BlockingPortal
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp_types import methods as _methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..codes import CallErrorCode, GateCode
from ..deferred.catalog import ToolDef
from ..deferred.session import IndexFollower, Session
from ..model import Risk
from ..run.registry import CallResult, Registry
from ..snapshot.loader import LoadConfig
from ..snapshot.store import SnapshotStore
from ..snapshot.watch import Watcher, WatchProblem
from .early import INSTRUCTIONS, SERVER_NAME, Wire, server_version
from .stdio import guarded_stdio

if TYPE_CHECKING:
    from ..toolbox import Toolbox

log = logging.getLogger("tooldir.serve")
T = TypeVar("T")

MAX_CONCURRENT_CALLS = 16  # tool runs at once per ToolServer (one stdio connection, or every HTTP client); more wait
DEFAULT_TURN_IDLE_S = 30.0
CALL_CONTEXT: Mapping[str, Any] = {"via": "mcp"}
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
    """A deep copy of a (possibly frozen) JSON value as plain dicts and lists (C-speed round trip)."""
    return json.loads(json.dumps(value, ensure_ascii=False, allow_nan=False))


def mcp_tool(name: str, description: str, input_schema: Mapping[str, Any], risk: Risk | None) -> types.Tool:
    """One tool as MCP lists it.

    Raises:
        ValueError: the name is not a valid MCP tool name or the schema is not an object schema
            (the loader never lets such a tool through; this is a last check at the boundary).
    """
    if not MCP_TOOL_NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a valid MCP tool name")
    # shallow: pydantic's JSON-mode dump builds fresh plain containers for the nested values
    schema = dict(input_schema) if isinstance(input_schema, Mapping) else None
    if schema is None or schema.get("type") != "object":
        raise ValueError(f"the input schema of {name!r} is not a JSON Schema of type object")
    meta = {"tooldir/risk": str(risk)} if risk is not None else None
    return types.Tool(
        name=name,
        description=description,
        input_schema=schema,
        annotations=tool_annotations(risk),
        _meta=meta,
    )


def mcp_tool_from_def(definition: ToolDef) -> types.Tool:
    """A catalog :class:`~tooldir.deferred.catalog.ToolDef` (working-set entry) as MCP lists it."""
    return mcp_tool(definition.name, definition.description, definition.input_schema, definition.risk)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False, sort_keys=True)


def call_tool_result(
    *,
    ok: bool,
    content: Any,
    error_code: CallErrorCode | GateCode | None = None,
    error_message: str | None = None,
    audit_id: str | None = None,
) -> types.CallToolResult:
    """A tooldir call outcome as an MCP result: failures are ``isError`` results whose text starts
    with ``error[<code>]`` and whose structured content is ``{"error": {"code", "message"}}``."""
    meta: dict[str, Any] = {}
    if audit_id is not None:
        meta[AUDIT_META_KEY] = audit_id
    if ok:
        plain = None if content is None else _plain(content)
        return types.CallToolResult(
            content=[types.TextContent(text="" if plain is None else _text(plain))],
            structured_content=plain if isinstance(plain, dict) else None,
            is_error=False,
            _meta=meta or None,
        )
    code = error_code or CallErrorCode.TOOL_ERROR
    message = error_message or "the tool failed"
    meta[ERROR_META_KEY] = code
    return types.CallToolResult(
        content=[types.TextContent(text=f"error[{code}]: {message}")],
        structured_content={"error": {"code": code, "message": message}},
        is_error=True,
        _meta=meta,
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

    async def observe(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Server middleware: remember the handshake-era channel once the handshake is done."""
        if self._legacy is None and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS and ctx.method != "initialize":
            self._legacy = ctx.session
        return await call_next(ctx)

    async def tools_changed(self) -> None:
        await self.bus.publish(ToolsListChanged())
        if self._legacy is not None:
            try:
                await self._legacy.send_tool_list_changed()
            except Exception as exc:  # the client went away mid-send; the read loop ends the server
                log.debug("could not send tools/list_changed: %s", exc)


# ------------------------------------------------------------------------------------------------
# The server


#: What tooldir adds to a tools/list result: clients must not cache a list that changes with
#: every search (ttlMs 0), and the list is complete (2026-07-28 fields; older versions drop them).
LIST_ENVELOPE: Mapping[str, Any] = {"ttlMs": 0, "cacheScope": "private", "resultType": "complete"}


@dataclass(slots=True)
class _Rendered:
    definition: ToolDef
    wire: dict[str, Any]
    by_version: dict[str, dict[str, Any]] = field(default_factory=dict)


@functools.cache
def _shaped_envelope(version: str) -> dict[str, Any]:
    shaped = _methods.serialize_server_result("tools/list", version, {"tools": [], **LIST_ENVELOPE})
    return {k: v for k, v in shaped.items() if k != "tools"}


class ToolServer:
    """One MCP connection's view of tooldir: a :class:`~tooldir.deferred.session.Session` over the
    registry, kept current by the watcher, sending list_changed whenever the working set changes.

    Blocking work (tool runs in the sandbox, search, listing) runs in worker threads so the
    protocol loop stays responsive. MCP has no notion of a conversation turn, so a turn ends when
    the client has been idle for ``turn_idle_s`` seconds: the next call first closes the turn
    (usage evidence, re-deferral of idle tools, per-turn budgets reset).
    """

    def __init__(
        self,
        *,
        store: SnapshotStore,
        registry: Registry,
        session: Session,
        watcher: Watcher | None = None,
        turn_idle_s: float = DEFAULT_TURN_IDLE_S,
        notifier: ListChangedNotifier | None = None,
    ) -> None:
        if turn_idle_s < 0:
            raise ValueError("turn_idle_s must be >= 0")
        self.store = store
        self.registry = registry
        self.session = session
        self.watcher = watcher
        self.turn_idle_s = turn_idle_s
        self.notifier = notifier or ListChangedNotifier()
        self._wire: dict[int, _Rendered] = {}  # rendering 10k tools is not free
        self._portal: BlockingPortal | None = None
        self._limiter: anyio.CapacityLimiter | None = None
        self._activity = threading.Lock()
        self._last_call: float | None = None
        self._unsubscribe = session.subscribe(self._on_session_change)
        self.upstream: Any = None  # the UpstreamHub of MCP server packages, if there are any
        self.follower: IndexFollower | None = None  # the session's, when open() made it
        self.toolbox: Toolbox | None = None  # what open() opened: closing it stops all of it

    def warm_search(self) -> None:
        """Build the search index now (blocking; a background thread), so the first tool_search
        does not wait for it."""
        if self.follower is not None:
            try:
                self.follower.current  # noqa: B018 - builds the index
            except Exception as exc:  # the first tool_search builds it again and reports
                log.warning("could not build the search index ahead of time: %s", exc)

    @classmethod
    def open(
        cls,
        config: LoadConfig,
        *,
        watch: bool = True,
        policy_file: str | os.PathLike[str] | None = None,
        turn_idle_s: float = DEFAULT_TURN_IDLE_S,
        notifier: ListChangedNotifier | None = None,
    ) -> ToolServer:
        """Load the roots, build the registry and one session, and start watching (blocking):
        :func:`tooldir.toolbox.open_config` wires them, and the registry and the session follow a
        reloaded policy file."""
        from ..toolbox import open_config

        box = open_config(config, policy_file=policy_file, watch=watch, upstream=True)  # DESIGN §10 packages too
        try:
            store, registry = box.store, box.registry
            problem = registry.sandbox_problem()
            if problem is not None:
                log.warning(
                    "no working sandbox (%s): directory tools will be refused with sandbox-unavailable", problem
                )
            else:  # the first calls of the first tools then only release a sandbox set up meanwhile (bounded)
                registry.prepare_sandboxes()
            # the search index is built on the first search, or by warm_search once serving
            front = cls(
                store=store,
                registry=registry,
                session=box.session(),
                watcher=box.watcher,
                turn_idle_s=turn_idle_s,
                notifier=notifier,
            )
        except BaseException:
            box.close()
            raise
        front.toolbox = box
        front.follower = box.follower
        front.upstream = box.hub
        snap = store.current
        log.info("snapshot %s: %d tool(s) found, %d offered", snap.id, len(snap.tools), len(snap.by_name))
        return front

    # -- tools/list ------------------------------------------------------------------------------

    def _rendered(self) -> list[_Rendered]:
        """The working set, rendered; the session pins every schema it hands out. Rendering is
        cached per definition object: the session hands out the same objects for as long as a
        snapshot is current."""
        fresh: dict[int, _Rendered] = {}
        out: list[_Rendered] = []
        for definition in self.session.working_set():
            key = id(definition)  # safe: the cache holds the object, so its id cannot be reused
            entry = self._wire.get(key)
            if entry is None or entry.definition is not definition:
                try:
                    wire = mcp_tool_from_def(definition).model_dump(by_alias=True, mode="json", exclude_none=True)
                except ValueError as exc:  # the loader should never let this through; never offer it
                    log.error("not offering %r over MCP: %s", definition.name, exc)
                    continue
                entry = _Rendered(definition, wire)
            fresh[key] = entry
            out.append(entry)
        self._wire = fresh
        return out

    def list_tools_sync(self) -> list[dict[str, Any]]:
        """The working set as MCP ``Tool`` JSON objects (latest protocol shape)."""
        return [entry.wire for entry in self._rendered()]

    async def list_tools(self) -> dict[str, Any]:
        """The ``tools/list`` result for the SDK to shape (one page: clients expect the whole set)."""
        tools = await anyio.to_thread.run_sync(self.list_tools_sync)
        return {"tools": tools, **LIST_ENVELOPE}

    def list_result_sync(self, version: str) -> dict[str, Any]:
        """The finished ``tools/list`` result for protocol ``version``, exactly what the SDK's
        per-version shaping would produce, but each tool is shaped once (when first listed)
        instead of on every list: at 10k tools that shaping dominates the cost of a list.

        Raises:
            ValueError: ``version`` is not a protocol version the SDK knows.
        """
        envelope = _shaped_envelope(version)
        entries = self._rendered()
        new = [e for e in entries if version not in e.by_version]
        if new:  # one SDK pass over every tool not shaped for this version yet
            shaped = _methods.serialize_server_result(
                "tools/list", version, {"tools": [e.wire for e in new], **LIST_ENVELOPE}
            )
            for entry, tool in zip(new, shaped["tools"], strict=True):
                entry.by_version[version] = tool
        return {**envelope, "tools": [e.by_version[version] for e in entries]}

    # -- tools/call ------------------------------------------------------------------------------

    def call_tool_sync(self, name: str, arguments: Mapping[str, Any] | None) -> types.CallToolResult:
        try:
            self._turn_boundary()
            result = self.session.call(name, {} if arguments is None else arguments, context=CALL_CONTEXT)
            return _as_mcp_result(name, result)
        except Exception:  # a bug, not a tool failure: still an isError result, never a protocol error
            log.exception("tools/call %r failed inside tooldir", name)
            return call_tool_result(
                ok=False,
                content=None,
                error_code=CallErrorCode.INTERNAL_ERROR,
                error_message="tooldir failed while handling this call (see the server log); nothing was returned",
            )
        finally:
            with self._activity:
                self._last_call = time.monotonic()

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None) -> types.CallToolResult:
        """Run the call off the loop, in one of :data:`MAX_CONCURRENT_CALLS` slots. A cancelled
        request (``notifications/cancelled``, or the client hung up) stops waiting at once, but the
        run goes on to its end (bounded by the tool's ``timeout_s``) and keeps its slot until then:
        cancelling never lets more runs live at once than the cap (``serve:starve``)."""
        limiter = self._limiter
        if limiter is None:
            return await _off_loop(lambda: self.call_tool_sync(name, arguments))
        slot = object()  # the run's own token: released by the run's end, not by the request's
        await limiter.acquire_on_behalf_of(slot)
        return await _off_loop(
            lambda: self.call_tool_sync(name, arguments), on_end=lambda: limiter.release_on_behalf_of(slot)
        )

    def calls_running(self) -> int:
        """Slots held now: runs not yet ended, including those whose request was cancelled."""
        return 0 if self._limiter is None else int(self._limiter.borrowed_tokens)

    def _turn_boundary(self) -> None:
        with self._activity:
            last = self._last_call
            ended = last is not None and time.monotonic() - last >= self.turn_idle_s
            if ended:
                self._last_call = None
        if ended:
            for step in self.session.next_turn():
                log.info("turn %s: %s %s (%s)", step.get("turn"), step.get("action"), step.get("tool"), step.get("why"))

    # -- change notifications --------------------------------------------------------------------

    def attach(self, portal: BlockingPortal) -> None:
        """Start delivering list_changed through ``portal`` (the protocol loop's); call on the loop."""
        self._portal = portal
        self._limiter = anyio.CapacityLimiter(MAX_CONCURRENT_CALLS)

    def detach(self) -> None:
        self._portal = None

    def _on_session_change(self, version: int) -> None:
        # Called from worker or watcher threads, possibly under the session's lock: never block here.
        portal = self._portal
        if portal is None:
            return
        log.info("working set changed (version %d): sending tools/list_changed", version)
        try:
            portal.start_task_soon(self.notifier.tools_changed)
        except RuntimeError:  # the portal closed (shutting down) or we are on the loop thread
            log.debug("tools/list_changed not sent: no running protocol loop")

    def close(self) -> None:
        """Stop watching and close the session (persists usage priors). Idempotent; a failing
        step is logged and the others still run, so shutdown never ends in a traceback."""
        self.detach()
        steps: list[tuple[str, Callable[[], None]]] = [("unsubscribe", self._unsubscribe)]
        if self.toolbox is not None:  # the watcher, the session, the search index, the MCP servers
            steps.append(("close the toolbox", self.toolbox.close))
        else:
            if self.watcher is not None:
                steps.append(("stop the watcher", self.watcher.stop))
            steps.append(("close the session (usage priors)", self.session.close))
            if self.follower is not None:
                steps.append(("stop following snapshots for search", self.follower.close))
            if self.upstream is not None:
                steps.append(("stop the MCP server packages", self.upstream.close))
        for what, step in steps:
            try:
                step()
            except Exception as exc:
                log.warning("shutdown: could not %s: %s", what, exc)


async def _off_loop(fn: Callable[[], T], *, on_end: Callable[[], None] | None = None) -> T:
    """``fn()`` in a fresh daemon thread. Unlike a worker-pool thread, an abandoned daemon thread
    never holds the process open at exit, and the sandbox it spawned (``--die-with-parent``) dies
    with it, so a client that hangs up mid-call leaves no process behind. ``on_end`` runs on the
    loop once ``fn`` has returned or raised, also when the awaiting task was cancelled meanwhile
    (or at once when no thread could be started)."""
    token = anyio.lowlevel.current_token()
    done = anyio.Event()
    box: list[tuple[bool, Any]] = []

    def finish() -> None:
        done.set()
        if on_end is not None:
            on_end()

    def run() -> None:
        try:
            box.append((True, fn()))
        except BaseException as exc:  # handed to the awaiting task below
            box.append((False, exc))
        finally:
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is waiting any more
                anyio.from_thread.run_sync(finish, token=token)

    try:
        threading.Thread(target=run, name="tooldir-mcp-call", daemon=True).start()
    except BaseException:  # no thread: nothing runs, the slot is free again
        if on_end is not None:
            on_end()
        raise
    await done.wait()
    ok, value = box[0]
    if ok:
        return cast(T, value)
    raise value


def _as_mcp_result(name: str, result: CallResult) -> types.CallToolResult:
    error = result.error
    log.info("tools/call %r: %s (audit %s)", name, "ok" if error is None else error.code, result.audit_id)
    if error is None:
        return call_tool_result(ok=result.ok, content=result.content, audit_id=result.audit_id)
    message = error.message
    if error.code == CallErrorCode.UNKNOWN_TOOL and "tool_search" not in message:
        message += "; call tool_search with keywords or exact names to find and load tools"
    return call_tool_result(
        ok=False, content=result.content, error_code=error.code, error_message=message, audit_id=result.audit_id
    )


def _exit_on_signal(front: ToolServer | None, name: str) -> NoReturn:
    """Close down and exit now. A graceful return is not possible here: the stdio transport's
    reader sits in a blocking read of stdin that only the client closing it can end. Calls still
    running are abandoned; their sandboxes die with this process (``--die-with-parent``).
    ``front`` None: the tools are still loading; nothing to close."""
    log.info("signal %s: shutting down", name)
    if front is not None:
        front.close()
    log.info("signal %s; shut down cleanly", name)
    logging.shutdown()
    os._exit(0)


def _log_problem(problem: WatchProblem) -> None:
    log.warning("watcher: %s: %s (snapshot generation %d kept)", problem.code, problem.message, problem.generation)


class OpeningServer:
    """The :class:`ToolServer` of a connection while it is still being opened (loading the roots)
    in a worker thread: the protocol loop already answers what needs no tools (``initialize``,
    ``ping``); tools requests wait in :meth:`get`. Its notifier is the one the server is built with."""

    def __init__(self) -> None:
        self.notifier = ListChangedNotifier()
        self.front: ToolServer | None = None
        self.failed = False
        self._ready = anyio.Event()

    def open(self, config: LoadConfig, **options: Any) -> None:
        """Open the ToolServer (blocking; a worker thread). Kept here as soon as it exists, so a
        connection that ends meanwhile still closes it."""
        try:
            self.front = ToolServer.open(config, notifier=self.notifier, **options)
        except BaseException:
            self.failed = True
            raise

    def ready(self, portal: BlockingPortal | None) -> None:
        """On the loop, once :meth:`open` returned or failed: release the waiting requests."""
        if self.front is not None and portal is not None:
            self.front.attach(portal)
        self._ready.set()

    async def wait(self) -> None:
        """Until :meth:`ready` (opened or failed)."""
        await self._ready.wait()

    async def get(self) -> ToolServer:
        await self._ready.wait()
        if self.front is None:
            raise RuntimeError("tooldir could not load its tools (see the server log)")
        return self.front


def build_server(front: ToolServer | OpeningServer) -> Server[Any]:
    """The SDK's low-level server with tooldir's handlers: tools/list, tools/call and
    subscriptions/listen (2026-07-28 change notifications). With an :class:`OpeningServer`,
    tools requests wait until it is open."""

    async def current() -> ToolServer:
        return front if isinstance(front, ToolServer) else await front.get()

    async def on_list_tools(ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams) -> HandlerResult:
        # a plain dict: the SDK still validates it against the negotiated protocol version, but the
        # cached wire form of each tool skips a pydantic dump of every tool on every list
        return await (await current()).list_tools()

    async def on_call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return await (await current()).call_tool(params.name, params.arguments)

    server: Server[Any] = Server(
        SERVER_NAME,
        version=_version(),
        title="tooldir",
        instructions=server_instructions(front),
        on_call_tool=on_call_tool,
        on_subscriptions_listen=ListenHandler(front.notifier.bus),
    )
    server.add_request_handler("tools/list", types.PaginatedRequestParams, on_list_tools)

    async def fast_list(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """tools/list with per-tool shaping cached (see ToolServer.list_result_sync). Anything
        unusual - not yet initialized, malformed params - takes the SDK's own path instead."""
        version = ctx.protocol_version
        modern = version in MODERN_PROTOCOL_VERSIONS
        if ctx.method != "tools/list" or ctx.request_id is None or not (modern or ctx.session.client_params):
            return await call_next(ctx)
        try:
            _methods.validate_client_request("tools/list", version, ctx.params)
        except (KeyError, ValueError):  # pydantic's ValidationError is a ValueError
            return await call_next(ctx)
        result = await anyio.to_thread.run_sync((await current()).list_result_sync, version)
        if modern:  # what the SDK stamps on every 2026-era result
            result["_meta"] = {types.SERVER_INFO_META_KEY: server.server_info_stamp}
        return result

    server.middleware += [front.notifier.observe, fast_list]
    return server


def server_instructions(front: ToolServer | OpeningServer) -> str:
    """The ``initialize`` (and ``server/discover``) instructions: tooldir's own, then one quoted,
    attributed section per trusted MCP server package whose instructions are pinned, unchanged and
    pass the text checks (:func:`tooldir.upstream.compose_instructions`; DESIGN §10)."""
    opened = front.front if isinstance(front, OpeningServer) else front
    upstream = None if opened is None else opened.upstream
    if upstream is None:  # no MCP server packages, or not open yet (see serve_stdio's open_first)
        return INSTRUCTIONS
    from ..upstream import compose_instructions

    return compose_instructions(INSTRUCTIONS, upstream.instructions())


def _version() -> str:
    return server_version()


async def serve_stdio(
    config: LoadConfig,
    *,
    watch: bool = True,
    policy_file: str | os.PathLike[str] | None = None,
    turn_idle_s: float = DEFAULT_TURN_IDLE_S,
    wire: Wire | None = None,
    open_first: bool = False,
) -> None:
    """Serve one MCP connection on this process's stdin/stdout until the client closes stdin
    (or SIGTERM/SIGINT arrives).

    The protocol stream is moved off file descriptors 0 and 1 while serving (fd 1 then writes to
    stderr), so a stray print, a library's warning or a child process can never write into it.
    ``wire``: the stream already claimed (and its first line perhaps answered) by the caller,
    see :mod:`tooldir.mcp.early`. The roots load in a worker thread while the protocol loop
    already runs: ``initialize`` never waits for them; tools requests do. ``open_first``: the
    roots load before the server answers anything, so its ``initialize`` instructions include
    those of the trusted MCP server packages (:func:`server_instructions`).

    Raises:
        ToolDirError: the roots, state or policy could not be loaded (the connection is closed).
    """
    opening = OpeningServer()
    failure: list[Exception] = []
    async with guarded_stdio(wire) as (read_stream, write_stream):  # malformed lines get JSON-RPC errors
        try:
            async with BlockingPortal() as portal, anyio.create_task_group() as tg:

                async def stop_on_signal() -> None:
                    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                        async for signum in signals:
                            _exit_on_signal(opening.front, signal.Signals(signum).name)

                async def open_front() -> None:
                    try:
                        await anyio.to_thread.run_sync(
                            lambda: opening.open(config, watch=watch, policy_file=policy_file, turn_idle_s=turn_idle_s)
                        )
                    except Exception as exc:  # ToolDirError: raised below, after the connection is closed
                        failure.append(exc)
                        opening.ready(None)
                        tg.cancel_scope.cancel()
                        return
                    opening.ready(portal)
                    if opening.front is not None:
                        threading.Thread(
                            target=opening.front.warm_search, name="tooldir-search-index", daemon=True
                        ).start()

                tg.start_soon(stop_on_signal)
                tg.start_soon(open_front)
                if open_first:
                    await opening.wait()
                server = build_server(opening)
                options = server.create_initialization_options(NotificationOptions(tools_changed=True))
                log.info("serving %d root(s) over stdio", len(config.roots))
                await server.run(read_stream, write_stream, options)
                tg.cancel_scope.cancel()
        finally:
            if opening.front is not None:
                opening.front.close()
    if failure:
        raise failure[0]
    log.info("the client closed the connection; shut down cleanly")
