"""A Session is one conversation: it pins what the model has seen and gates calls on it.

- **Eager or deferred** at the start is the static :class:`~tooldir.deferred.defer.DeferralPlan` of the
  tools this session offers (``[defer]`` rules, and in ``auto`` mode the token cost; see
  :mod:`tooldir.deferred.defer`): the same plan ``scan``, ``catalog`` and ``tooldir serve`` report
  (:func:`initial_plan`). What the session does from there on (tools ``tool_search`` loaded,
  idle tools re-deferred) is its own dynamic state, kept here.
- **Pins**: for every tool the model has seen (the working set it was shown, or a search result),
  the session keeps the digest of that schema version (:attr:`ToolDef.digest`).
- **Gate** (:meth:`authorize`, called by ``Registry.call``): a deferred tool not loaded is refused
  (``session:unloaded``: search first); a tool whose schema changed since it was pinned is refused
  (``session:stale``) until it is loaded again.
- **tool_search**: exact names and keyword queries; a miss changes no state; budgets per turn;
  an identical repeated search answers with a hint.
- **Re-deferral** at :meth:`next_turn` by the usage model of :mod:`tooldir.deferred.usage`.

Working-set changes bump :attr:`version` and call :meth:`subscribe`\\ d callbacks (``fn(version)``),
so a server can send ``tools/list_changed``.
"""

from __future__ import annotations

import importlib.util
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from ..codes import CallErrorCode
from ..model import BuiltinSpec, ToolRecord, is_runnable, why_not_runnable
from ..names import GUARD_TOOLS
from ..policy import Policy, load_policy
from ..run.permissions import PermissionCheck, from_policy
from ..run.registry import CallError, CallResult, Registry
from ..snapshot.store import Snapshot, SnapshotDiff, SnapshotStore
from ..state import absolute_state_dir
from .catalog import (
    DEFER_EXECUTE_TOOL,
    GUARD_DEFS,
    DirectoryEntry,
    Format,
    Match,
    SearchResult,
    ToolDef,
    directory_entry,
    directory_text,
    tool_def,
)
from .defer import DeferralPlan
from .search import ParsedQuery, Ranker, SearchIndex, lexical_scores, parse_query
from .staticplan import View as _View
from .staticplan import initial_plan
from .staticplan import static_view as _static_view
from .tokens import TokenCounter, TokenReport, default_counter
from .usage import Usage, end_turn, judge, load_priors, save_priors, start

__all__ = ["MAX_TOP_K", "IndexFollower", "Match", "SearchResult", "Session", "initial_plan"]

MAX_TOP_K = 20


def _builtin_docs(specs: Iterable[BuiltinSpec]) -> dict[str, dict[str, Any]]:
    return {s.name: {"description": s.description, "input_schema": s.input_schema} for s in specs}


def _default_ranker() -> Ranker | None:
    """The semantic ranker when the ``[semantic]`` extra is installed; without it nothing more is
    imported (numpy, tooldir.deferred.semantic) and search is BM25F as before."""
    if importlib.util.find_spec("wordllama") is None:  # tooldir.deferred.semantic.MODEL_PACKAGE
        return None
    from .ensemble import default_ranker

    return default_ranker()


class IndexFollower:
    """One search index kept in step with a snapshot store (share it between sessions).

    The index is built on first use (the first search), not when the follower is made: listing
    the working set (a session's first ``tools/list``) never waits for it. Once built, it follows
    every publication by diff."""

    def __init__(self, store: SnapshotStore, builtins: Iterable[BuiltinSpec] = ()) -> None:
        self._lock = threading.Lock()
        self._builtins = _builtin_docs(b for b in builtins if b.name not in GUARD_TOOLS)
        self._views: dict[tuple[Any, ...], _View] = {}
        self._index: SearchIndex | None = None
        with self._lock:  # subscribe first: a publication racing this is never missed
            self._unsubscribe = store.subscribe(self._on_publish)
            self._snapshot = store.current

    def _on_publish(self, snapshot: Snapshot, change: SnapshotDiff) -> None:
        with self._lock:
            held = self._snapshot.generation
            if snapshot.generation <= held:
                return  # already seen (published while this follower was being made)
            if self._index is not None:
                if change.old_generation == held:
                    self._index = self._index.apply_diff(snapshot, change, builtins=self._builtins)
                else:  # a diff from a snapshot this index never saw: rebuild
                    self._index = SearchIndex.from_snapshot(
                        snapshot, builtins=self._builtins, ranker=self._index.ranker
                    )
            self._snapshot = snapshot

    def _current_snapshot(self) -> Snapshot:
        """The snapshot followed, without building the index."""
        return self._snapshot

    @property
    def current(self) -> tuple[Snapshot, SearchIndex]:
        with self._lock:
            if self._index is None:
                # the semantic ranker too is made on first use (its model loads when it first ranks)
                self._index = SearchIndex.from_snapshot(
                    self._snapshot, builtins=self._builtins, ranker=_default_ranker()
                )
            return self._snapshot, self._index

    def shared(self, key: tuple[Any, ...], compute: Callable[[], _View]) -> _View:
        """A view computed once for all sessions with the same snapshot and configuration."""
        with self._lock:
            view = self._views.get(key)
        if view is None:
            view = compute()
            with self._lock:
                self._views[key] = view
                while len(self._views) > 8:
                    self._views.pop(next(iter(self._views)))
        return view

    def close(self) -> None:
        self._unsubscribe()


@dataclass(slots=True)
class _Loaded:
    usage: Usage
    tokens: int
    pinned: bool = False


@dataclass(slots=True)
class _Turn:
    searches: int = 0
    schema_tokens: int = 0
    used: set[str] = field(default_factory=set)


class Session:
    """One conversation over the tools of ``store`` (see the module docstring).

    ``registry`` runs calls (and supplies builtins); without it :meth:`tool_search` and the
    catalog work but :meth:`call` raises. ``policy``: None means the registry's, or without one
    the user's policy file (as the CLI reads it). ``state_dir`` (optional) holds persisted usage
    priors; it must be absolute (StateDirError), never a folder of the project.
    """

    def __init__(
        self,
        store: SnapshotStore,
        *,
        policy: Policy | None = None,
        registry: Registry | None = None,
        builtins: Iterable[BuiltinSpec] = (),
        state_dir: str | Path | None = None,
        follower: IndexFollower | None = None,
        counter: TokenCounter | None = None,
        session_id: str | None = None,
    ) -> None:
        if policy is None:
            policy = registry.policy if registry is not None else load_policy()[0]
        self._state_dir = (
            absolute_state_dir(state_dir, setting="Session(state_dir=...)") if state_dir is not None else None
        )
        self.id = session_id or "sess-" + uuid.uuid4().hex[:12]
        self._store = store
        self._policy = policy
        self._registry = registry
        specs = {b.name: b for b in builtins}
        if registry is not None:
            specs.update({b.name: b for b in registry.builtin_specs()})
        self._builtins = {n: s for n, s in specs.items() if n not in GUARD_TOOLS}
        self._follower = follower or IndexFollower(store, self._builtins.values())
        self._own_follower = follower is None
        self._counter = counter or default_counter()
        self._permissions = from_policy(policy.permissions)
        self._policy_key = policy.model_dump_json()  # views are shared by content, never by object id
        self._priors = load_priors(self._state_dir) if self._state_dir is not None else {}
        self._lock = threading.RLock()
        self._view_cache: _View | None = None
        self._pins: dict[str, str] = {}  # name -> schema digest the model has seen
        self._relied: dict[str, str] = {}  # name -> contract digest (input schema, risk) of that version
        self._loaded: dict[str, _Loaded] = {}  # deferred tools in the working set, in load order
        self._observed: dict[str, Usage] = {}  # for the persisted priors
        self._turn = _Turn()
        self.turn = 1
        self._last_search: dict[tuple[Any, ...], tuple[tuple[str, str], ...]] = {}
        self._log: list[dict[str, Any]] = []
        self._subscribers: list[Callable[[int], None]] = []
        self.version = 0
        self._dirty = False
        self._closed = False
        self._working_digest = self._working_key()
        self._unsubscribe = store.subscribe(self._on_publish)

    # ----------------------------------------------------------------------------- the view

    def _permission_check(self) -> PermissionCheck:
        """What the listing asks: the registry's host check when the host gave one (the same object
        :meth:`Registry.call` asks), else the rules of this session's policy."""
        host = self._registry.host_permissions if self._registry is not None else None
        return host if host is not None else self._permissions

    def _view(self) -> _View:
        snapshot = self._follower._current_snapshot()
        cached = self._view_cache
        if cached is not None and cached.snapshot_id == f"{snapshot.id}/{snapshot.generation}":
            return cached
        host = self._registry.host_permissions if self._registry is not None else None
        key = (
            snapshot.id,
            snapshot.generation,
            self._policy_key,
            id(self._counter),
            tuple(sorted(self._builtins)),
            None if host is None else id(host),  # a host's check is its own view: never shared by policy text
        )
        view = self._follower.shared(key, lambda: self._compute_view(snapshot))
        self._view_cache = view
        return view

    def _compute_view(self, snapshot: Snapshot) -> _View:
        return _static_view(snapshot, self._policy, self._builtins, self._permission_check(), self._counter)

    def _tokens(self, d: ToolDef) -> int:
        return self._counter.count_json(d.anthropic())

    def is_deferred(self, name: str) -> bool:
        with self._lock:
            return name in self._view().deferred

    @property
    def defer_decision(self) -> Mapping[str, Any]:
        with self._lock:
            return dict(self._view().plan.decision)

    @property
    def deferral_plan(self) -> DeferralPlan:
        """The static plan of the current snapshot under this session's policy: where this session
        started (before any tool_search or re-deferral), and what ``scan`` and ``catalog`` report."""
        with self._lock:
            return self._view().plan

    # ----------------------------------------------------------------------------- what the model sees

    def directory(self) -> list[DirectoryEntry]:
        """The compact directory: deferred tools not currently loaded, by name."""
        with self._lock:
            view = self._view()
            return [directory_entry(view.defs[n]) for n in sorted(view.deferred) if n not in self._loaded]

    def directory_text(self) -> str:
        return directory_text(self.directory())

    def working_set(self, *, pin: bool = True) -> list[ToolDef]:
        """Full definitions for the next request: eager tools, the guard tools (when anything is
        deferred), then loaded deferred tools in load order. Pins what it returns (the model is
        about to see exactly these schemas)."""
        with self._lock:
            view = self._view()
            eager = [view.defs[n] for n in sorted(view.defs) if n not in view.deferred]
            guards = list(GUARD_DEFS) if view.deferred else []
            loaded = [view.defs[n] for n in self._loaded if n in view.deferred]  # eager now: listed above
            out = eager + guards + loaded
            if pin:
                for d in eager + loaded:
                    self._pins[d.name] = d.digest
                    self._relied[d.name] = d.contract_digest
            return out

    def tools(self, fmt: Format = "anthropic") -> list[dict[str, Any]]:
        return [d.render(fmt) for d in self.working_set()]

    def anthropic_deferred_tools(self) -> list[dict[str, Any]]:
        """Every available tool for the Anthropic API's native deferral: deferred ones carry
        ``defer_loading: true`` and are expanded by ``tool_reference`` blocks from tool_search."""
        with self._lock:
            view = self._view()
            out = [g.anthropic() for g in GUARD_DEFS if view.deferred]
            out += [view.defs[n].anthropic(defer_loading=n in view.deferred) for n in sorted(view.defs)]
            return out

    def token_report(self) -> TokenReport:
        with self._lock:
            view = self._view()
            full = sum(self._tokens(d) for d in view.defs.values())
            eager = sum(self._tokens(view.defs[n]) for n in view.defs if n not in view.deferred)
            guards = sum(self._tokens(g) for g in GUARD_DEFS) if view.deferred else 0
            directory = self._counter.count(
                directory_text([directory_entry(view.defs[n]) for n in sorted(view.deferred)])
            )
            loaded = sum(self._tokens(view.defs[n]) for n in self._loaded if n in view.deferred)
            return TokenReport(
                full_load=full,
                first_turn=eager + guards + directory,
                loaded_increment=loaded,
                exact=self._counter.exact,
                method=self._counter.method,
                tools=len(view.defs),
                deferred=len(view.deferred),
                directory=directory,
            )

    # ----------------------------------------------------------------------------- tool_search

    def tool_search(
        self,
        *,
        queries: Sequence[str] = (),
        tool_names: Sequence[str] = (),
        top_k: int = 5,
        scope: Literal["deferred", "all"] = "deferred",
    ) -> SearchResult:
        """Find deferred tools by exact name and/or keywords and load the matches.

        Exact names keep the caller's order (duplicates folded) and come first; keyword matches
        follow by (-score, name), ``top_k`` per query. A search that matches nothing changes no state.
        ``scope="all"`` lets keyword queries match eager tools too (the CLI's view).
        """
        top_k = max(1, min(int(top_k), MAX_TOP_K))
        selects: list[str] = []
        keyword: list[str] = []
        for q in queries:
            if q.strip().startswith("select:"):
                selects.extend(n.strip() for n in q.strip()[len("select:") :].split(","))
            elif q.strip():
                keyword.append(q.strip())
        selects = list(dict.fromkeys([*tool_names, *selects]))
        selects = [s for s in selects if s]
        keyword = list(dict.fromkeys(keyword))
        with self._lock:
            result = self._search(selects, keyword, top_k, scope)
        self._flush()
        return result

    def _search(self, selects: list[str], keyword: list[str], top_k: int, scope: str) -> SearchResult:
        view = self._view()
        _, index = self._follower.current
        found: dict[str, float | None] = {}
        missing: list[str] = []
        unavailable: dict[str, str] = {}
        reasons: list[tuple[str, str]] = []
        for name in selects:
            if name in view.defs and scope == "deferred" and name not in view.deferred:
                # an immediate tool: the model has it already, and no deferred entry point wraps it
                missing.append(name)
                reasons.append((name, f"immediate: {name!r} is already loaded (not deferred); call it directly"))
            elif name in view.defs:
                found.setdefault(name, None)
            elif name in view.unavailable:
                unavailable[name] = view.unavailable[name]
            else:
                missing.append(name)
        scored: dict[str, float] = {}
        searchable = view.deferred.__contains__ if scope == "deferred" else view.defs.__contains__
        for q in keyword:
            parsed: ParsedQuery = parse_query(q)
            hits = index.search(parsed, top_k=top_k, allow=searchable)
            if view.unavailable:  # scored among those few names only
                for h in lexical_scores(index, parsed, among=view.unavailable).top(top_k):
                    unavailable.setdefault(h.name, view.unavailable[h.name])
            if not hits:
                missing.append(q)
            for h in hits:
                if h.name not in found and h.score > scored.get(h.name, -1.0):
                    scored[h.name] = h.score
        order = list(found) + sorted(scored, key=lambda n: (-scored[n], n))
        unavailable_t = tuple(sorted(unavailable.items()))
        if not order:  # a miss changes no state
            return SearchResult((), tuple(missing), unavailable_t, _immediate_hint(reasons), tuple(reasons))
        if self._turn.searches >= self._policy.defer.max_searches_per_turn:
            return SearchResult(
                (),
                tuple(missing),
                unavailable_t,
                hint=f"search budget for this turn is used up ({self._policy.defer.max_searches_per_turn} "
                "searches); use the tools already loaded or answer with what you have",
                missing_reasons=tuple(reasons),
            )
        key = (tuple(selects), tuple(keyword), top_k)
        signature = tuple((n, view.defs[n].digest) for n in order)
        if self._last_search.get(key) == signature and all(self._pins.get(n) == d for n, d in signature):
            return SearchResult(
                (),
                tuple(missing),
                unavailable_t,
                hint="same search, same results as before: "
                + ", ".join(order)
                + " are already loaded; call them instead of searching again",
                missing_reasons=tuple(reasons),
            )
        matches: list[Match] = []
        withheld: list[str] = []
        promoted = False
        for name in order:
            d = view.defs[name]
            score = found.get(name) if name in found else scored[name]
            state = "cached" if self._pins.get(name) == d.digest else "loaded"
            if name in view.deferred and name not in self._loaded:
                tokens = self._tokens(d)
                if (
                    len(self._loaded) >= self._policy.defer.max_working_set
                    or self._turn.schema_tokens + tokens > self._policy.defer.max_schema_tokens_per_turn
                ):
                    withheld.append(name)
                    continue
                self._turn.schema_tokens += tokens
                seen = self._observed.get(name)  # re-loaded: keep the evidence, restart the idle count
                usage = replace(seen, idle_turns=0) if seen else start(self._policy.defer, self._priors.get(name))
                self._loaded[name] = _Loaded(usage, tokens)
                promoted = True
                why = "exact name" if score is None else f"keyword match, score {score:.3f}"
                self._explain(name, "promoted", why, {"schema_tokens": tokens, "p_use_prior": round(usage.p_use, 4)})
            self._pins[name] = d.digest
            self._relied[name] = d.contract_digest
            matches.append(Match(name, score, str(view.sources[name]), state, d.schema_json()))
        self._turn.searches += 1
        self._last_search[key] = signature
        hint = None
        if withheld:
            hint = (
                f"not loaded (working-set or per-turn schema-token budget reached): {', '.join(withheld)}; "
                "use the loaded tools first or search again next turn"
            )
        if promoted:
            self._changed()
        return SearchResult(
            tuple(matches), tuple(missing), unavailable_t, hint or _immediate_hint(reasons), tuple(reasons)
        )

    # ----------------------------------------------------------------------------- calls

    def authorize(self, record: ToolRecord) -> tuple[CallErrorCode, str] | None:
        """The CallGate of ``Registry.call``: None to allow, or (code, message) to refuse."""
        name = record.name
        if name in GUARD_TOOLS:
            return None
        with self._lock:
            view = self._view()
            current = tool_def(record, self._builtins.get(name))
            digest = None if current is None else current.digest
            pinned = self._pins.get(name)
            if name not in view.defs:
                # Not offered by this session: hidden by its permissions (the registry may enforce
                # a reloaded, looser policy) or newer than its view (published a moment ago). The
                # model never saw it, so it cannot have loaded it: fail closed.
                reason = view.unavailable.get(name)
                if reason is not None and reason.startswith("permission:"):
                    return (CallErrorCode.PERMISSION_DENIED, f"{name!r} is not available in this session ({reason})")
                return (
                    CallErrorCode.SESSION_UNLOADED,
                    f"{name!r} is not loaded in this session"
                    + (f" ({reason})" if reason is not None else "")
                    + f'; call tool_search with tool_names=["{name}"] first, then call it',
                )
            if name in view.deferred and (name not in self._loaded or pinned is None):
                return (
                    CallErrorCode.SESSION_UNLOADED,
                    f"{name!r} is deferred and not loaded in this session; call tool_search with "
                    f'tool_names=["{name}"] first, then call it',
                )
            if (
                pinned is not None
                and digest != pinned
                and (current is None or current.contract_digest != self._relied.get(name))
            ):
                # what the caller relied on (the input schema or the risk) changed; a changed
                # description alone is not refused: the call runs against the current version and
                # the client hears list_changed (see _on_publish)
                return (
                    CallErrorCode.SESSION_STALE,
                    f"the schema of {name!r} changed since this session loaded it; load it again with "
                    f'tool_search tool_names=["{name}"] and re-check the input',
                )
            self._turn.used.add(name)
            return None

    def defer_execute_tool(self, name: Any, input: Any, *, context: Mapping[str, Any] | None = None) -> CallResult:
        """Run a loaded deferred tool. Immediate (eager) tools are refused: call them directly."""
        if not isinstance(name, str) or not name:
            return _refused(CallErrorCode.INVALID_INPUT, "defer_execute_tool needs 'name' (a tool name string)")
        if name in GUARD_TOOLS:
            return _refused(CallErrorCode.SESSION_IMMEDIATE, f"{name!r} is a guard tool: call it directly")
        with self._lock:
            view = self._view()
            if name in view.defs and name not in view.deferred:
                return _refused(CallErrorCode.SESSION_IMMEDIATE, f"{name!r} is not deferred: call it directly")
        return self._registry_call(name, input, context)

    def call(self, name: str, input: Any, *, context: Mapping[str, Any] | None = None) -> CallResult:
        """Any call the model makes: guard tools are handled here, the rest go to the registry."""
        if name == "tool_search":
            return self._call_tool_search(input)
        if name == DEFER_EXECUTE_TOOL.name:
            if not isinstance(input, Mapping) or set(input) - {"name", "input"} or "name" not in input:
                return _refused(CallErrorCode.INVALID_INPUT, "defer_execute_tool takes {'name': str, 'input': object}")
            inner = input.get("input", {})
            if not isinstance(inner, Mapping):
                return _refused(CallErrorCode.INVALID_INPUT, "defer_execute_tool: 'input' must be an object")
            return self.defer_execute_tool(input["name"], inner, context=context)
        return self._registry_call(name, input, context)

    def _call_tool_search(self, input: Any) -> CallResult:
        if not isinstance(input, Mapping) or set(input) - {"queries", "tool_names", "top_k", "query"}:
            return _refused(
                CallErrorCode.INVALID_INPUT, "tool_search takes queries, tool_names (string lists) and top_k"
            )
        queries, names, top_k = input.get("queries", []), input.get("tool_names", []), input.get("top_k", 5)
        if isinstance(queries, str):
            queries = [queries]
        if isinstance(input.get("query"), str):
            queries = [*queries, input["query"]]
        if not (isinstance(queries, list) and all(isinstance(q, str) for q in queries)):
            return _refused(CallErrorCode.INVALID_INPUT, "tool_search: 'queries' must be a list of strings")
        if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            return _refused(CallErrorCode.INVALID_INPUT, "tool_search: 'tool_names' must be a list of strings")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
            return _refused(
                CallErrorCode.INVALID_INPUT, f"tool_search: 'top_k' must be an integer from 1 to {MAX_TOP_K}"
            )
        if not queries and not names:
            return _refused(CallErrorCode.INVALID_INPUT, "tool_search needs 'queries' or 'tool_names'")
        result = self.tool_search(queries=queries, tool_names=names, top_k=top_k)
        return CallResult(ok=True, content=result.to_json(), error=None, audit_id=None)

    def _registry_call(self, name: str, input: Any, context: Mapping[str, Any] | None) -> CallResult:
        if self._registry is None:
            raise RuntimeError("this session has no registry; create it with Session(..., registry=...)")
        return self._model_facing(name, self._registry.call(name, input, session=self, context=context))

    def _model_facing(self, name: str, result: CallResult) -> CallResult:
        """A refusal of a tool that is not active, in tooldir's own words: the registry's reason
        quotes diagnostics, which may quote the tool's text (its argv, file names, ...), and
        nothing of a pending or rejected tool may reach the model (trust:listing). Only the
        status, the diagnostic codes and the name the model itself asked for are kept."""
        error = result.error
        if error is None or error.code != CallErrorCode.NOT_ACTIVE:
            return result
        snapshot = self._follower._current_snapshot()
        record = snapshot.by_name.get(name)
        if record is None or is_runnable(record):
            others = [r for r in snapshot.records(name) if not is_runnable(r)]
            record = others[-1] if others else None
        return replace(result, error=CallError(error.code, why_not_runnable(name, record, for_model=True)))

    # ----------------------------------------------------------------------------- turns

    def pin(self, name: str) -> None:
        """Keep a loaded deferred tool loaded for the rest of the session (never re-deferred)."""
        with self._lock:
            if name not in self._loaded:
                raise ValueError(f"{name!r} is not a loaded deferred tool of this session")
            self._loaded[name].pinned = True

    def next_turn(self) -> list[dict[str, Any]]:
        """Close the current turn: update usage evidence, re-defer idle tools, reset budgets.
        Returns the explanations of this step."""
        with self._lock:
            before = len(self._log)
            view = self._view()
            dropped = False
            for name, entry in list(self._loaded.items()):
                entry.usage = end_turn(self._policy.defer, entry.usage, name in self._turn.used)
                self._observed[name] = entry.usage
                verdict = judge(self._policy.defer, entry.usage, entry.tokens, pinned=entry.pinned)
                if verdict.redefer or name not in view.defs:
                    del self._loaded[name]
                    self._pins.pop(name, None)
                    self._relied.pop(name, None)
                    dropped = True
                    reason = verdict.reason if name in view.defs else "no longer available"
                    self._explain(name, "re-deferred", reason, verdict.numbers)
            self._turn = _Turn()
            self._last_search.clear()
            self.turn += 1
            if dropped:
                self._changed()
            steps = self._log[before:]
        self._flush()
        return steps

    def explanations(self) -> list[dict[str, Any]]:
        """Every promotion and re-deferral so far, with the numbers behind it."""
        with self._lock:
            return list(self._log)

    def _explain(self, name: str, action: str, why: str, numbers: Mapping[str, Any]) -> None:
        self._log.append({"turn": self.turn, "tool": name, "action": action, "why": why, **numbers})

    def loaded(self) -> list[str]:
        with self._lock:
            return list(self._loaded)

    # ----------------------------------------------------------------------------- changes

    def subscribe(self, fn: Callable[[int], None]) -> Callable[[], None]:
        """Call ``fn(version)`` whenever the working set changes. Returns an unsubscribe function."""
        with self._lock:
            self._subscribers.append(fn)

        def unsubscribe() -> None:
            with self._lock:
                if fn in self._subscribers:
                    self._subscribers.remove(fn)

        return unsubscribe

    def _working_key(self) -> tuple[tuple[str, str], ...]:
        return tuple((d.name, d.digest) for d in self.working_set(pin=False))

    def _changed(self) -> None:
        """Record a working-set change (under the lock); :meth:`_flush` notifies after release."""
        self._working_digest = self._working_key()
        self.version += 1
        self._dirty = True

    def _flush(self) -> None:
        with self._lock:
            if not self._dirty:
                return
            self._dirty = False
            version, subscribers = self.version, list(self._subscribers)
        for fn in subscribers:  # outside the lock: a subscriber may call back into the session
            fn(version)

    def update_policy(self, policy: Policy) -> None:
        """Follow a reloaded user policy (defer rules, budgets, permissions) from the next request
        on; subscribers hear of it if what the model would see changes. Loaded tools stay loaded
        while the new policy still offers them."""
        with self._lock:
            if policy == self._policy:
                return
            self._policy = policy
            self._policy_key = policy.model_dump_json()
            self._permissions = from_policy(policy.permissions)
            self._view_cache = None
            if self._working_key() != self._working_digest:
                self._changed()
        self._flush()

    def _on_publish(self, snapshot: Snapshot, change: SnapshotDiff) -> None:
        del snapshot, change  # the follower holds the new snapshot; compare what the model would see
        with self._lock:
            if self._working_key() != self._working_digest:
                self._changed()
        self._flush()

    def close(self) -> None:
        """Persist usage priors (if a state dir was given) and stop following the store."""
        with self._lock:
            if self._closed:  # once: saving again would fold this session into the priors twice
                return
            self._closed = True
            self._unsubscribe()
            if self._own_follower:
                self._follower.close()
            for name, entry in self._loaded.items():
                self._observed[name] = entry.usage
            if self._state_dir is not None and self._observed:
                save_priors(self._state_dir, self._observed, self._policy.defer)


def _immediate_hint(reasons: list[tuple[str, str]]) -> str | None:
    if not reasons:
        return None
    names = ", ".join(n for n, _ in reasons)
    return f"already loaded (immediate, not deferred): {names}; call them directly, no tool_search needed"


def _refused(code: CallErrorCode, message: str) -> CallResult:
    return CallResult(ok=False, content=None, error=CallError(code, message), audit_id=None)
