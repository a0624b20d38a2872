"""The front door for hosts: :func:`open` wires the stages into one :class:`Toolbox`.

``tooldir.open()`` is the one composition root (DESIGN §12): it reads the configuration the CLI
reads, loads the roots once into a :class:`~tooldir.snapshot.store.SnapshotStore`, builds the
:class:`~tooldir.run.registry.Registry` over it, optionally starts the :class:`~tooldir.snapshot.watch.Watcher`
and the trusted MCP server packages, and hands out :class:`~tooldir.deferred.session.Session` objects over
that same registry. The CLI's ``run`` and ``search`` open theirs with :func:`open_config`, the same
wiring after their own argument handling.

Defaults are the CLI's, each resolved once here: ``project="."``, ``user_dirs=None`` (the user's
tool root, ``$XDG_CONFIG_HOME/tooldir/tools``), ``policy=None`` (the user's policy file under the
machine's managed policy, exactly as ``tooldir scan`` reads it; the built-in defaults when there
is neither), ``state_dir=None`` (``$TOOLDIR_STATE_DIR`` or ``$XDG_STATE_HOME/tooldir``). A relative
``state_dir`` (or ``$TOOLDIR_STATE_DIR``) is refused with ``StateDirError`` before anything is read.

**One policy.** The toolbox holds the policy in force; the loader, the registry and every session
it made use that one object. With ``watch=True`` a changed policy file is reloaded by the watcher
(as ``tooldir serve`` does) and the toolbox passes it on to the registry and to every open session,
so the next call and the next listing obey it. A ``Policy`` object given as ``policy=`` is used as
given and never reloaded (there is no file to follow).

**A pending project runs nothing.** Opening a project whose tools are not approved, signed or
pinned is not an error: the snapshot lists them as ``pending`` (with ``not-approved`` or
``changed-since-approval``), no session offers them and :meth:`Toolbox.call` refuses them with
``not-active``, exactly as ``tooldir run`` does, until the user approves them (``tooldir allow`` or
:func:`tooldir.approve`). Nothing of the project is executed, imported or started by ``open()``:
MCP server packages are started only with ``upstream=True`` and only once trusted.

:meth:`Toolbox.close` (or leaving the ``with`` block) stops the watcher and joins its thread,
closes the sessions it handed out (persisting their usage priors), stops the MCP servers it
started and the registry's background work (spare sandboxes, audit syncing: :meth:`Registry.close`).
It is idempotent.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from .deferred.session import IndexFollower, Session
from .model import BuiltinSpec, Risk
from .policy import Policy
from .run.hooks import Hook
from .run.permissions import PermissionCheck
from .run.registry import CallResult, Handler, Registry, builtin_spec
from .snapshot.loader import LoadConfig, Loader
from .snapshot.store import Snapshot, SnapshotDiff, SnapshotStore

if TYPE_CHECKING:  # the watcher (watchdog) is imported only when watch=True
    from .snapshot.watch import Watcher, WatchProblem

log = logging.getLogger("tooldir.toolbox")

__all__ = ["Builtin", "Toolbox", "open", "open_config"]


@dataclass(frozen=True, slots=True)
class Builtin:
    """A builtin Python tool for :func:`open` (what :meth:`Registry.register` takes): its name is
    reserved in the load, so no directory tool can take it."""

    name: str
    input_schema: Mapping[str, Any]
    handler: Handler
    description: str
    risk: Risk | str = Risk.READ


def open(  # the documented front door (DESIGN §12), tooldir.open
    project: str | os.PathLike[str] | None = ".",
    *,
    user_dirs: Iterable[str | os.PathLike[str]] | None = None,
    policy: Policy | str | os.PathLike[str] | None = None,
    state_dir: str | os.PathLike[str] | None = None,
    watch: bool = False,
    builtins: Iterable[Builtin] = (),
    permissions: PermissionCheck | None = None,
    hooks: Iterable[Hook] = (),
    upstream: bool = False,
) -> Toolbox:
    """Open the tools a host may offer, with the CLI's defaults (see the module docstring).

    ``project=None``: no project source. ``policy``: a policy file (read as ``--policy FILE``) or a
    :class:`~tooldir.policy.Policy`. ``builtins``: the host's Python tools. ``permissions``: replaces
    the policy's ``[permissions]`` rules for the registry and every session. ``hooks``: pre and post
    hooks (:class:`~tooldir.run.hooks.Hook`, ``kind`` ``"pre"`` or ``"post"``). ``upstream``: start the
    trusted MCP server packages and offer their tools. ``watch``: follow changes of the roots and of
    the policy file until :meth:`Toolbox.close`.

    Raises:
        StateDirError: ``state_dir`` or ``$TOOLDIR_STATE_DIR`` is relative.
        PolicyError: the policy file is missing (when named), invalid, or another user's.
        ConfigError: ``project`` is not a directory.
        ValueError: a builtin or hook that the registry would refuse.
        TypeError: ``policy`` is neither a path nor a ``Policy``.
    """
    from .errors import ConfigError
    from .policy import default_policy_path, read_policy
    from .snapshot.loader import make_config
    from .state import absolute_state_dir, default_state_dir

    # the state dir first, once: a relative one is refused before any file is read
    state = (
        default_state_dir()
        if state_dir is None
        else absolute_state_dir(state_dir, setting="tooldir.open(state_dir=...)")
    )
    if project is not None and not Path(project).is_dir():
        raise ConfigError(f"tooldir.open(project={os.fspath(project)!r}): not a directory")
    if isinstance(policy, Policy):
        config = make_config(project=project, user_dirs=user_dirs, policy=policy, state_dir=state)
        policy_file: str | os.PathLike[str] | None = None
    elif policy is None or isinstance(policy, str | os.PathLike):
        effective = read_policy(policy)
        config = make_config(
            project=project,
            user_dirs=user_dirs,
            policy=effective.policy,
            state_dir=state,
            policy_file=effective.file,
            policy_overridden=effective.overridden,
        )
        policy_file = default_policy_path() if policy is None else policy
    else:
        raise TypeError(
            f"tooldir.open(policy=...): expected a policy file path or a Policy, not {type(policy).__name__}"
        )
    return open_config(
        config,
        policy_file=policy_file,
        watch=watch,
        builtins=builtins,
        permissions=permissions,
        hooks=hooks,
        upstream=upstream,
    )


def open_config(
    config: LoadConfig,
    *,
    policy_file: str | os.PathLike[str] | None = None,
    watch: bool = False,
    builtins: Iterable[Builtin] = (),
    permissions: PermissionCheck | None = None,
    hooks: Iterable[Hook] = (),
    upstream: bool = False,
    load: Callable[[Loader], Snapshot] | None = None,
    secret_commands: bool = True,
    on_snapshot: Callable[[Snapshot, SnapshotDiff], None] | None = None,
    on_problem: Callable[[WatchProblem], None] | None = None,
    debounce_s: float | None = None,
) -> Toolbox:
    """:func:`open` for a configuration already made (the CLI makes it from its arguments).
    ``policy_file``: the file a watcher reloads the policy from. ``load``: how the first snapshot
    is loaded (the CLI draws progress and shares large roots with workers); ``Loader.load`` by default.
    ``secret_commands=False``: a secret given by a command is unavailable instead of run (the
    drills: a downloaded scenario's commands never run on the host). With ``watch=True``:
    ``on_snapshot`` gets the first snapshot (as a change from an empty one), then every swap (it
    is subscribed before the watcher starts, so none is missed);
    ``on_problem`` replaces logging the watcher's problems, ``debounce_s`` its batching delay."""

    hosted = tuple(builtins)
    hook_list = tuple(hooks)
    for hook in hook_list:
        if not isinstance(hook, Hook):
            raise TypeError(f"hooks: expected tooldir.Hook objects, not {type(hook).__name__}")
    specs: list[BuiltinSpec] = []
    for b in hosted:
        if not isinstance(b, Builtin):
            raise TypeError(f"builtins: expected tooldir.Builtin objects, not {type(b).__name__}")
        specs.append(builtin_spec(b.name, b.input_schema, b.handler, description=b.description, risk=b.risk))
    if specs:  # reserved in the load: no directory tool may take a builtin's name
        config = replace(config, builtins=(*config.builtins, *specs))
    loader = Loader(config)
    first = loader.load() if load is None else load(loader)
    if watch and not upstream:
        # a watcher without running servers: its snapshots carry the upstream tools of the MCP server
        # packages' last listings, as tooldir watch shows them (pins checked, no server started)
        from .upstream import listed_store

        store = listed_store(first, loader)
    else:
        store = SnapshotStore(first)
    registry = Registry(
        store,
        policy=config.policy,
        state_dir=config.state_dir,
        permissions=permissions,
        secret_commands=secret_commands,
    )
    for b in hosted:
        registry.register(b.name, b.input_schema, b.handler, description=b.description, risk=b.risk)
    for hook in hook_list:
        if hook.kind == "pre":
            registry.add_pre_hook(hook.fn, name=hook.name, match=hook.match)
        elif hook.kind == "post":
            registry.add_post_hook(hook.fn, name=hook.name, match=hook.match)
        else:
            raise ValueError(f"hook {hook.name!r}: kind must be 'pre' or 'post', not {hook.kind!r}")
    box = Toolbox(loader, store, registry)
    try:
        if upstream:
            from .upstream import open_upstream

            box._hub = open_upstream(
                registry, policy=config.policy, state_dir=config.state_dir, builtins=config.builtins, follow=True
            )
        if watch:
            from .snapshot.watch import Watcher

            options: dict[str, Any] = {} if debounce_s is None else {"debounce_s": debounce_s}
            box._watcher = Watcher(
                loader,
                store,
                policy_file=policy_file,
                on_problem=on_problem or _log_problem,
                on_policy=box._follow_policy,
                **options,
            )
            if on_snapshot is not None:
                from .snapshot.store import diff

                empty = Snapshot(id="", generation=0, tools=(), diagnostics=(), by_name={})
                on_snapshot(store.current, diff(empty, store.current))
                store.subscribe(on_snapshot)
            box._watcher.start()
    except BaseException:
        box.close()
        raise
    return box


class Toolbox:
    """What :func:`open` returns: the current snapshot, the registry over it, sessions, calls.

    Thread-safe as its parts are: the snapshot is swapped atomically by the watcher, the registry
    and sessions take their own locks."""

    def __init__(self, loader: Loader, store: SnapshotStore, registry: Registry) -> None:
        self._loader = loader
        self._store = store
        self._registry = registry
        self._policy = registry.policy
        self._watcher: Watcher | None = None
        self._hub: Any = None  # tooldir.upstream.UpstreamHub, when upstream=True found server packages
        self._follower: IndexFollower | None = None
        self._sessions: weakref.WeakSet[Session] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._closed = False

    # ----------------------------------------------------------------------------- what a host reads

    @property
    def snapshot(self) -> Snapshot:
        """The current snapshot (with ``watch=True``, the latest the watcher published)."""
        return self._store.current

    @property
    def store(self) -> SnapshotStore:
        return self._store

    @property
    def registry(self) -> Registry:
        """The registry every call of this toolbox and of its sessions goes through."""
        return self._registry

    @property
    def policy(self) -> Policy:
        """The policy in force (followed from the policy file with ``watch=True``)."""
        return self._policy

    @property
    def config(self) -> LoadConfig:
        """The load configuration in use (roots, state dir; its policy is :attr:`policy`)."""
        return self._loader.config

    @property
    def hub(self) -> Any:
        """The :class:`tooldir.upstream.UpstreamHub` serving the MCP server packages (``upstream=True``
        and the snapshot has some), else None."""
        return self._hub

    @property
    def watcher(self) -> Watcher | None:
        """The watcher (``watch=True``), started by :func:`open` and stopped by :meth:`close`."""
        return self._watcher

    @property
    def follower(self) -> IndexFollower | None:
        """The search index the sessions of this toolbox share (made with the first session)."""
        return self._follower

    @property
    def start_problems(self) -> Mapping[str, str]:
        """``upstream=True``: the MCP server packages whose server could not be started, and why."""
        problems: Mapping[str, str] = getattr(self._hub, "start_problems", {})
        return dict(problems)

    # ----------------------------------------------------------------------------- what a host does

    def session(self, **options: Any) -> Session:
        """A new :class:`~tooldir.deferred.session.Session` (one conversation) over this toolbox's registry
        and policy, remembering usage in its state dir; closed by :meth:`close` if still open.
        ``options`` go to ``Session`` (e.g. ``state_dir=None`` to keep no usage priors)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("this toolbox is closed")
            if self._follower is None:  # one search index for all the sessions of this toolbox
                self._follower = IndexFollower(self._store, self._registry.builtin_specs())
            options.setdefault("state_dir", self._loader.config.state_dir)
            options.setdefault("follower", self._follower)
            session = Session(self._store, policy=self._policy, registry=self._registry, **options)
            self._sessions.add(session)
        return session

    def call(self, name: str, input: Mapping[str, Any], *, context: Mapping[str, Any] | None = None) -> CallResult:
        """Run one tool through the registry's pipeline, outside any session. Never raises for
        tool-side failures: refusals and errors come back in the result (``not-active`` for a
        pending project tool)."""
        return self._registry.call(name, input, context=context)

    # ----------------------------------------------------------------------------- lifecycle

    def _follow_policy(self, policy: Policy) -> None:
        """The watcher reloaded the policy file: enforcement and every session follow it."""
        with self._lock:
            self._policy = policy
            sessions = list(self._sessions)
        self._registry.update_policy(policy)
        for session in sessions:
            session.update_policy(policy)

    def close(self) -> None:
        """Stop what :func:`open` started (see the module docstring). Idempotent; a failing step
        is logged and the others still run."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            sessions = list(self._sessions)
        steps: list[tuple[str, Callable[[], None]]] = []
        if self._watcher is not None:
            steps.append(("stop the watcher", self._watcher.stop))
        steps += [("close a session", s.close) for s in sessions]
        if self._follower is not None:
            steps.append(("stop following snapshots for search", self._follower.close))
        if self._hub is not None:
            steps.append(("stop the MCP server packages", self._hub.close))
        steps.append(("stop the registry's spare sandboxes and audit syncing", self._registry.close))
        for what, step in steps:
            try:
                step()
            except Exception as exc:
                log.warning("closing the toolbox: could not %s: %s", what, exc)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _log_problem(problem: WatchProblem) -> None:
    log.warning("watcher: %s: %s (snapshot generation %d kept)", problem.code, problem.message, problem.generation)
