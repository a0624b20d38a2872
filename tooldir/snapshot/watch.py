"""Change batches -> rebuild -> swap: keeps a ``SnapshotStore`` equal to a cold load of the roots.

Threads: the observer's thread (see :class:`Observer`) only maps each filesystem event to *what*
changed (a package folder name under a root, a whole root, the user's trust state, the policy
file) and wakes the worker. The worker debounces, coalesces a batch ``{root path: folder names |
None}``, re-arms the watches when a root or one of its parent folders changed, asks the loader to
rebuild only what changed and publishes the result with one reference swap. A build that fails
keeps the last good snapshot, is reported, and is retried (cold) with a bounded back-off.

What is watched (inotify, one instance, every watch non-recursive: see
``tooldir._internal.inotify``): every folder from the parent of the root's anchor down to the
root, so a root that appears, vanishes or is replaced (also by a symlink) is noticed; inside each
root exactly the folders discovery reads - the tool folders and, below each, its folders down to
``max_package_depth``, not below a folder with more than ``max_package_files`` entries, at most
``max_package_files`` folders per package, and nothing inside a root with more than
``max_root_entries`` entries (discovery loads nothing from it) - so a project cannot spend the
user's inotify watches by planting folder trees (``watch:exhaust``); the user's state folder
(approvals, signature high-water marks), so ``tooldir allow`` flips a tool from pending to active;
and the policy file's folder. Folders that appear or vanish inside a package re-arm that package's
watches only; the watches at and below a folder an event reports deleted, moved or created are
renewed (the kernel ends a deleted folder's watch, and a folder made again at once may have the
same inode number, so an unchanged (st_dev, st_ino) does not prove a watch alive), and a root
watched anew is listed again once its watch exists (a package made in between sends no event).
A package with more folders than it may have watched, or any beyond the watcher's
total ``max_watches``, is re-read every ``rescan_interval_s`` instead (reported once as
``watch-budget``). When the kernel runs out of inotify watches or instances, or drops events (queue
overflow), the watcher says so (``WatchProblem``), logs it, and falls back to full rescans every
``rescan_interval_s`` for as long as it is degraded; an overflow's rescan renews every watch.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Protocol, Self

from watchdog.events import (
    DirAttribEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirModifiedEvent,
    DirMovedEvent,
    FileAttribEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)

from ..codes import WatchCode
from ..errors import PolicyError
from ..policy import Limits, Policy, managed_defaults, read_policy
from ..read.discover import EntryKind, RootSpec, entry_kind, is_hidden
from ..state import APPROVALS, HIGH_WATER, UPSTREAM_STATE
from .loader import Loader
from .store import Snapshot, SnapshotDiff, SnapshotStore

log = logging.getLogger("tooldir.watch")

_IGNORED_EVENTS = frozenset({"opened", "closed_no_write"})
#: Only changes, never reads: without this filter every file the loader reads (and every folder
#: watchdog walks) queues open/close events, and at 10k packages a rescan overflows the kernel queue.
EVENT_FILTER: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    DirCreatedEvent,
    FileDeletedEvent,
    DirDeletedEvent,
    FileMovedEvent,
    DirMovedEvent,
    FileModifiedEvent,
    DirModifiedEvent,
    FileClosedEvent,
    FileAttribEvent,
    DirAttribEvent,
]
_STRUCTURAL = frozenset({"created", "deleted", "moved"})
_MAX_RETRY_S = 30.0


@dataclass(frozen=True, slots=True)
class WatchProblem:
    """Something the watcher could not do. ``code``: ``build-failed`` (the last good snapshot is
    kept), ``policy-invalid`` (the policy in use is kept), ``policy-removed`` (the defaults now
    apply), ``inotify-limit``, ``inotify-overflow``, ``watch-failed``."""

    code: WatchCode
    message: str
    generation: int  # of the snapshot still current

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "generation": self.generation}


@dataclass(frozen=True, slots=True)
class WatchStatus:
    mode: Literal["inotify", "degraded", "stopped"]
    watches: int  # folders scheduled with the observer
    builds: int  # successful builds since start (published or not)
    failures: int
    last_problem: WatchProblem | None


class Observer(Protocol):
    """What the watcher needs from an observer (``observer_factory``; tests pass a scripted one).

    ``schedule`` watches one folder non-recursively and returns a handle for ``unschedule``
    (raising ``OSError`` when the kernel refuses, e.g. ``ENOSPC``: the watcher degrades to
    rescans). Each change is delivered as ``event_handler.on_any_event(event)`` with a watchdog
    event object, from any thread; a lost-events condition (kernel queue overflow) is delivered as
    ``event_handler.on_overflow()``, which makes the watcher rescan everything. Nothing is read
    from log output."""

    def schedule(
        self,
        event_handler: FileSystemEventHandler,
        path: str,
        *,
        recursive: bool = False,
        event_filter: list[type[FileSystemEvent]] | None = None,
    ) -> Any: ...
    def unschedule(self, watch: Any) -> None: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def join(self, timeout: float | None = None) -> None: ...


def default_observer() -> Observer:
    """One inotify instance for every watch (watchdog's observers start a thread per folder)."""
    from .._internal.inotify import FlatInotifyObserver

    observer: Observer = FlatInotifyObserver()
    return observer


@dataclass(frozen=True, slots=True)
class _Target:
    """A folder whose existence and contents matter, and the ancestors that may replace it."""

    kind: Literal["root", "state", "policy"]
    path: str
    base: str  # highest ancestor watched; every folder from here down to ``path`` is watched
    trusted: int  # number of leading chain folders whose symlinks are followed (the anchor and above)
    root: RootSpec | None = None

    def chain(self) -> list[str]:
        parts = Path(self.path).relative_to(self.base).parts
        out = [self.base]
        for part in parts:
            out.append(os.path.join(out[-1], part))
        return out


@dataclass(slots=True)
class _Pending:
    changes: dict[str, set[str] | None] = field(default_factory=dict)
    trust: bool = False
    policy: bool = False
    rearm: bool = False
    stale: set[str] = field(default_factory=set)  # folders replaced: watches at or below them are renewed
    repack: dict[str, set[str]] = field(default_factory=dict)  # root folder -> packages whose folders changed
    full: bool = False
    first: float = 0.0
    last: float = 0.0

    def any(self) -> bool:
        return bool(self.changes) or self.trust or self.policy or self.rearm or self.full

    def touch(self, root: str, name: str | None, *, whole: bool = False) -> None:
        if whole:
            self.changes[root] = None
            return
        names = self.changes.setdefault(root, set())
        if names is not None and name is not None:
            names.add(name)


def _under(path: str, top: str) -> str | None:
    """The part of ``path`` below ``top`` ('' when equal), compared by components; None if outside."""
    if path == top:
        return ""
    prefix = top if top.endswith(os.sep) else top + os.sep
    if path.startswith(prefix):
        return path[len(prefix) :]
    return None


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: Watcher) -> None:
        self._watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        self._watcher._on_event(event)

    def on_overflow(self) -> None:  # the Observer protocol's lost-events seam
        self._watcher._on_overflow()


class Watcher:
    """Watches the loader's roots and publishes a new snapshot into ``store`` after each batch.

    ``debounce_s``: a batch is built once no event arrived for this long (or ``max_delay_s``
    after its first event). ``policy_file``: reload the policy when it changes (an invalid
    policy is reported and the old one kept; a deleted one means the defaults, as on a cold start). ``rescan_interval_s``: full-rescan period while
    degraded (no inotify watch could be added). ``trust_interval_s``: trust is re-checked this
    often even without events (a signed lock may expire; cheap: only what can change is
    re-assessed and nothing is published unless something changed). ``on_problem`` is called from the watcher's
    threads (``start()``'s caller for watch failures at start, else the worker); keep it quick.
    ``on_policy`` receives each successfully reloaded policy (``tooldir serve`` passes
    ``Registry.update_policy`` so permission and sandbox rules follow the file without a restart).

    Use as a context manager, or ``start()`` / ``stop()``.
    """

    def __init__(
        self,
        loader: Loader,
        store: SnapshotStore,
        *,
        debounce_s: float = 0.05,
        max_delay_s: float = 1.0,
        policy_file: str | os.PathLike[str] | None = None,
        rescan_interval_s: float = 10.0,
        trust_interval_s: float = 60.0,
        retry_s: float = 1.0,
        rescan_on_start: bool = True,
        observer_factory: Callable[[], Observer] = default_observer,
        on_problem: Callable[[WatchProblem], None] | None = None,
        on_policy: Callable[[Policy], None] | None = None,
        max_watches: int | None = None,
    ) -> None:
        if debounce_s < 0 or min(max_delay_s, rescan_interval_s, trust_interval_s, retry_s) <= 0:
            raise ValueError("debounce_s must be >= 0; max_delay_s, the intervals and retry_s > 0")
        self._loader = loader
        self._store = store
        self._debounce = debounce_s
        self._max_delay = max(max_delay_s, debounce_s)
        self._policy_file = os.path.abspath(policy_file) if policy_file is not None else None
        self._rescan_interval = rescan_interval_s
        self._trust_interval = trust_interval_s
        self._next_trust = time.monotonic() + trust_interval_s
        self._retry_base = retry_s
        self._rescan_on_start = rescan_on_start
        self._observer_factory = observer_factory
        self._on_problem = on_problem
        self._on_policy = on_policy
        self._cond = threading.Condition()
        self._pending = _Pending()
        self._stopping = False
        self._started = False
        self._observer: Observer | None = None
        self._handler = _Handler(self)
        self._watches: dict[tuple[str, bool], tuple[Any, tuple[int, int]]] = {}
        self._worker: threading.Thread | None = None
        self._degraded: WatchCode | None = None
        self._next_rescan = 0.0
        self._retry_at: float | None = None
        self._retry_delay = retry_s
        self._builds = 0
        self._failures = 0
        self._last_problem: WatchProblem | None = None
        self._targets = self._make_targets()
        self._max_watches_arg = max_watches
        self._partial: dict[str, set[str]] = {}  # RootSpec.path -> packages not fully watched
        self._overfull: set[str] = set()  # roots (folder paths) over max_root_entries: only the root is watched
        self._budget_reported = False

    # -- public API ------------------------------------------------------------------------------

    @property
    def store(self) -> SnapshotStore:
        return self._store

    def subscribe(self, fn: Callable[[Snapshot, SnapshotDiff], None]) -> Callable[[], None]:
        """``fn(snapshot, diff)`` after every publication, in generation order; returns an unsubscribe."""
        return self._store.subscribe(fn)

    def wait_for(self, predicate: Callable[[Snapshot], bool], timeout: float) -> Snapshot:
        """Block until the current snapshot satisfies ``predicate``. Raises ``TimeoutError``."""
        return self._store.wait_for(predicate, timeout)

    def wait_for_generation(self, generation: int, timeout: float) -> Snapshot:
        return self._store.wait_for_generation(generation, timeout)

    def status(self) -> WatchStatus:
        with self._cond:
            if not self._started or self._stopping:
                mode: Literal["inotify", "degraded", "stopped"] = "stopped"
            else:
                mode = "degraded" if self._degraded else "inotify"
            return WatchStatus(mode, len(self._watches), self._builds, self._failures, self._last_problem)

    def start(self) -> None:
        """Arm the watches (when this returns, changes are being noticed) and start the worker."""
        with self._cond:
            if self._started:
                raise RuntimeError("a Watcher can be started once")
            self._started = True
        try:
            self._observer = self._observer_factory()
            self._observer.start()
        except OSError as exc:
            self._observer = None
            self._degrade(exc)
        self._arm()
        with self._cond:
            if self._rescan_on_start:
                self._pending.full = True
                self._pending.first = self._pending.last = time.monotonic()
        self._worker = threading.Thread(target=self._run, name="tooldir-watch", daemon=True)
        self._worker.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop watching; waits (bounded) for a build in progress to finish. Idempotent."""
        with self._cond:
            if not self._started or self._stopping:
                self._stopping = True
                return
            self._stopping = True
            self._cond.notify_all()
        if self._worker is not None:
            self._worker.join(timeout)
            if self._worker.is_alive():
                log.warning("watcher worker still building after %.1f s; it stops after this build", timeout)
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout)
        self._watches.clear()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- targets and watches ---------------------------------------------------------------------

    def _make_targets(self) -> list[_Target]:
        targets = []
        for root in self._loader.config.roots:
            anchor = os.path.abspath(root.anchor)
            base = os.path.dirname(anchor) or anchor
            path = os.path.join(anchor, *root.parts)
            trusted = len(Path(anchor).relative_to(base).parts) + 1
            targets.append(_Target("root", path, base, trusted, root))
        state = os.path.abspath(self._loader.config.state_dir)
        targets.append(_Target("state", state, os.path.dirname(state) or state, 1 << 30))
        if self._policy_file is not None:
            folder = os.path.dirname(self._policy_file)
            targets.append(_Target("policy", folder, os.path.dirname(folder) or folder, 1 << 30))
        return targets

    def _desired(self) -> dict[tuple[str, bool], tuple[int, int]]:
        """(folder, recursive) -> (st_dev, st_ino) of every folder that should be watched now."""
        want: dict[tuple[str, bool], tuple[int, int]] = {}
        for target in self._targets:
            chain = target.chain()
            base = chain[0]
            while not os.path.isdir(base) and os.path.dirname(base) != base:
                base = os.path.dirname(base)  # watch the nearest existing ancestor until the base appears
            if base != chain[0]:
                ident = _identity(base, follow=True)
                if ident is not None:
                    want[(base, False)] = ident
                continue
            for i, folder in enumerate(chain):
                ident = _identity(folder, follow=i < target.trusted)
                if ident is None:
                    break  # missing, not a folder, or a symlink below the anchor: its parent's watch reports changes
                want[(folder, False)] = ident
        return want

    # -- what discovery reads: the folders inside the roots (watch:exhaust) ----------------------

    @property
    def _max_watches(self) -> int:
        """``max_watches`` as given, or derived from the policy's current limits."""
        return self._max_watches_arg if self._max_watches_arg is not None else self._default_budget()

    def _default_budget(self) -> int:
        """The most watches this watcher may hold: every chain folder, and per root its tool
        folders (at most ``max_root_entries``) plus as many folders again below them, plus one
        package's worth (``max_package_files``)."""
        limits = self._loader.config.policy.limits
        chains = sum(len(t.chain()) for t in self._targets)
        return chains + 64 + len(self._loader.config.roots) * (2 * limits.max_root_entries + limits.max_package_files)

    def _root_contents(self, want: dict[tuple[str, bool], tuple[int, int]]) -> dict[str, set[str]]:
        """Add the folders discovery reads inside every watched root to ``want`` (parents first),
        within the budget; returns the packages that could not be watched whole."""
        limits = self._loader.config.policy.limits
        partial: dict[str, set[str]] = {}
        self._overfull = set()
        for target in self._targets:
            if target.kind != "root" or target.root is None or (target.path, False) not in want:
                continue
            packages = root_packages(target.path, limits)
            if packages is None:
                self._overfull.add(target.path)
                continue
            for pkg in packages:
                room = self._max_watches - len(want)
                folders, complete = package_folders(pkg, limits, min(limits.max_package_files, max(room, 0)))
                for folder, ident in folders:
                    want[(folder, False)] = ident
                if not complete:
                    partial.setdefault(target.root.path, set()).add(os.path.basename(pkg))
        return partial

    def _set_partial(self, partial: dict[str, set[str]]) -> None:
        with self._cond:
            first = not self._partial and partial
            self._partial = partial
            if first:
                self._next_rescan = min(self._next_rescan or float("inf"), time.monotonic() + self._rescan_interval)
        names = sorted(os.path.join(root, name) for root, held in partial.items() for name in held)
        if names and not self._budget_reported:
            self._budget_reported = True
            limits = self._loader.config.policy.limits
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            self._report(
                WatchCode.WATCH_BUDGET,
                f"{shown}: more folders than are watched (at most {limits.max_package_files} per package, "
                f"{self._max_watches} in all); changes there are picked up by a rescan every "
                f"{self._rescan_interval:g} s",
            )

    def _relist_roots(self, added: set[str]) -> None:
        """List again the roots whose watch was just added, now that their changes are seen, and
        watch (parents first, listing each folder after its watch) every package in them."""
        limits = self._loader.config.policy.limits
        relist: dict[str, set[str]] = {}
        for target in self._targets:
            if target.kind != "root" or target.path not in added or target.path in self._overfull:
                continue
            packages = root_packages(target.path, limits)
            if packages:
                relist[target.path] = {os.path.basename(p) for p in packages}
        if relist:
            self._arm_packages(relist, relist=False)

    def _arm_packages(
        self,
        repack: dict[str, set[str]],
        stale: set[str] | frozenset[str] = frozenset(),
        *,
        relist: bool = True,
    ) -> None:
        """Re-arm the watches of the named packages only (a folder appeared or vanished in them;
        watches at or below a ``stale`` folder are renewed); a root whose entry count crossed
        ``max_root_entries`` gets a full re-arm."""
        observer = self._observer
        if observer is None:
            return
        limits = self._loader.config.policy.limits
        partial = {k: set(v) for k, v in self._partial.items()}
        for target in self._targets:
            names = repack.get(target.path)
            if not names or target.root is None or (target.path, False) not in self._watches:
                continue
            appeared = target.path in self._overfull or any(
                (os.path.join(target.path, n), False) not in self._watches for n in names
            )
            # a tool folder appeared or vanished: the root's entry count may have crossed the limit
            if appeared and (root_packages(target.path, limits) is None) != (target.path in self._overfull):
                self._arm(stale, relist=relist)
                return
            if target.path in self._overfull:
                continue
            for name in sorted(names):
                if not name or is_hidden(name) or os.sep in name:
                    continue
                pkg = os.path.join(target.path, name)
                for _ in range(3):  # again while new folders appear under ones just watched
                    room = self._max_watches - len(self._watches)
                    folders, complete = package_folders(pkg, limits, limits.max_package_files)
                    added, fits = self._sync_folders(pkg, dict(folders), room, stale)
                    stale = frozenset()  # renewed once; the next passes only add folders that appeared
                    if not added:
                        break
                held = partial.setdefault(target.root.path, set())
                if complete and fits:
                    held.discard(name)
                else:
                    held.add(name)
                if not held:
                    del partial[target.root.path]
        self._set_partial(partial)

    def _sync_folders(
        self, top: str, want: dict[str, tuple[int, int]], room: int, stale: set[str] | frozenset[str] = frozenset()
    ) -> tuple[bool, bool]:
        """Make the watches at or below ``top`` exactly ``want`` (parents first), adding at most
        ``room`` new ones; watches at or below a ``stale`` folder are renewed. (anything added,
        everything fitted)."""
        observer = self._observer
        assert observer is not None  # noqa: S101 - callers check
        prefix = top + os.sep
        for key, (watch, ident) in list(self._watches.items()):
            folder = key[0]
            if (folder == top or folder.startswith(prefix)) and (
                want.get(folder) != ident or any(_under(folder, s) is not None for s in stale)
            ):
                del self._watches[key]
                try:
                    observer.unschedule(watch)
                except (KeyError, OSError) as exc:
                    log.debug("unschedule %s: %s", folder, exc)
        added = False
        for folder, ident in want.items():
            key = (folder, False)
            if key in self._watches:
                continue
            if room <= 0:
                return added, False
            try:
                watch = observer.schedule(self._handler, folder, recursive=False, event_filter=EVENT_FILTER)
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as exc:
                self._degrade(exc, folder)
                return added, False
            self._watches[key] = (watch, ident)
            room -= 1
            added = True
        return added, True

    def _arm(self, stale: set[str] | frozenset[str] = frozenset(), *, relist: bool = True) -> None:
        """Bring the scheduled watches in line with the folders that exist now; watches at or
        below a ``stale`` folder (deleted, moved or replaced) are renewed. A root watched anew is
        listed again once its watch exists (``relist``): a package made between the first listing
        and the watch sent no event and would never be watched."""
        observer = self._observer
        if observer is None:
            return
        desired = self._desired()
        partial = self._root_contents(desired)
        for key, (watch, ident) in list(self._watches.items()):
            if desired.get(key) != ident or any(_under(key[0], s) is not None for s in stale):
                del self._watches[key]
                try:
                    observer.unschedule(watch)
                except (KeyError, OSError) as exc:  # the emitter may have stopped itself (folder deleted)
                    log.debug("unschedule %s: %s", key[0], exc)
        added: set[str] = set()
        for key, ident in desired.items():
            if key in self._watches:
                continue
            folder, recursive = key
            try:
                watch = observer.schedule(self._handler, folder, recursive=recursive, event_filter=EVENT_FILTER)
            except (FileNotFoundError, NotADirectoryError):
                continue  # vanished meanwhile: the parent's watch reports it
            except OSError as exc:
                self._degrade(exc, folder)
                if exc.errno in (errno.EMFILE, errno.ENOSPC):
                    break  # the kernel's limit: the periodic full rescan covers the rest
                continue
            self._watches[key] = (watch, ident)
            added.add(folder)
        self._set_partial(partial)
        if relist:
            self._relist_roots(added)
        if self._degraded in (WatchCode.INOTIFY_LIMIT, WatchCode.WATCH_FAILED) and len(self._watches) == len(desired):
            with self._cond:
                self._degraded = None
            log.warning("every folder is watched again; leaving the periodic-rescan fallback")

    def _degrade(self, exc: OSError, folder: str | None = None) -> None:
        code = WatchCode.INOTIFY_LIMIT if exc.errno in (errno.EMFILE, errno.ENOSPC) else WatchCode.WATCH_FAILED
        where = f" {folder}" if folder else ""
        if code == WatchCode.INOTIFY_LIMIT:
            message = (
                f"cannot watch{where}: {exc}; raise fs.inotify.max_user_watches / max_user_instances "
                f"(sysctl). Falling back to a full rescan every {self._rescan_interval:g} s"
            )
        else:
            message = f"cannot watch{where}: {exc}; falling back to a full rescan every {self._rescan_interval:g} s"
        with self._cond:
            first = self._degraded is None
            self._degraded = code
            self._next_rescan = time.monotonic() + self._rescan_interval
        if first:
            log.warning("%s", message)
        self._report(code, message)

    # -- events (observer threads) ---------------------------------------------------------------

    def _on_event(self, event: FileSystemEvent) -> None:
        kind = event.event_type
        if kind in _IGNORED_EVENTS:
            return
        paths = [os.fsdecode(event.src_path)]
        dest = getattr(event, "dest_path", "")
        if dest:
            paths.append(os.fsdecode(dest))
        with self._cond:
            noted = False
            for path in paths:
                noted = self._note(path, kind, folder=event.is_directory) or noted
            if noted:
                now = time.monotonic()
                if not self._pending.first:
                    self._pending.first = now
                self._pending.last = now
                self._cond.notify_all()

    def _note(self, path: str, kind: str, *, folder: bool = False) -> bool:
        """Record what ``path`` changing means. Called with ``_cond`` held."""
        pending = self._pending
        noted = False
        for target in self._targets:
            rel = _under(path, target.path)
            if rel is not None and rel:  # inside the target
                if target.kind == "root" and target.root is not None:
                    name = rel.split(os.sep, 1)[0]
                    pending.touch(target.root.path, name)
                    if kind in _STRUCTURAL:  # a folder may have appeared or vanished: re-arm that package
                        pending.repack.setdefault(target.path, set()).add(name)
                        if folder:
                            # the kernel dropped the watch of a folder deleted here, and one made
                            # again at once often has the same inode number (ext4): the same
                            # identity must not keep the dead watch, so it is renewed
                            pending.stale.add(path)
                    noted = True
                elif target.kind == "state" and rel in (APPROVALS, HIGH_WATER, UPSTREAM_STATE):
                    pending.trust = noted = True
                elif target.kind == "policy" and path == self._policy_file:
                    pending.policy = noted = True
                continue
            if rel == "" or _under(target.path, path) is not None:  # the target itself or one of its ancestors
                if kind == "modified":
                    continue  # its listing changed: the child's own event says which (chmod is "attrib")
                structural = kind in _STRUCTURAL
                if structural:
                    # a new folder may reuse the inode number of the deleted one: renew the watches
                    pending.rearm = True
                    pending.stale.add(path)
                if target.kind == "root" and target.root is not None:
                    pending.touch(target.root.path, None, whole=structural)
                elif target.kind == "state":
                    pending.trust = True
                else:
                    pending.policy = True
                noted = True
        return noted

    def _on_overflow(self) -> None:
        self._report(
            WatchCode.INOTIFY_OVERFLOW, "the kernel dropped filesystem events (inotify queue overflow); full rescan"
        )
        with self._cond:
            self._pending.full = True
            self._pending.rearm = True
            # the lost events may include deletions: a folder made again with the same inode number
            # would look watched, so every watch is renewed
            self._pending.stale.update(t.base for t in self._targets)
            now = time.monotonic()
            self._pending.first = self._pending.first or now
            self._pending.last = now
            self._cond.notify_all()

    # -- the worker ------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            try:
                self._process(batch)
            except Exception as exc:  # never let the worker die: report, keep the snapshot, retry
                log.exception("watcher batch failed")
                self._failed(exc)

    def _next_batch(self) -> _Pending | None:
        with self._cond:
            while not self._stopping:
                now = time.monotonic()
                pending = self._pending
                if not pending.any():
                    if self._next_trust <= now:
                        # trust may change with time alone (a signed lock expires): re-check it
                        pending.trust = True
                        pending.first = pending.last = now
                        self._next_trust = now + self._trust_interval
                        continue
                    waits = [self._next_trust]
                    if self._degraded or self._partial:
                        waits.append(self._next_rescan)
                    if self._retry_at is not None:
                        waits.append(self._retry_at)
                    due = min(waits)
                    if (self._degraded and self._next_rescan <= now) or (
                        self._retry_at is not None and self._retry_at <= now
                    ):
                        pending.full = True
                        pending.rearm = bool(self._degraded)
                        pending.first = pending.last = now
                        self._retry_at = None
                        self._next_rescan = now + self._rescan_interval
                        continue
                    if self._partial and self._next_rescan <= now:
                        for root_path, names in self._partial.items():  # not fully watched: re-read them
                            for name in names:
                                pending.touch(root_path, name)
                        pending.first = pending.last = now
                        self._next_rescan = now + self._rescan_interval
                        continue
                    self._cond.wait(due - now)
                    continue
                ready_at = min(pending.last + self._debounce, pending.first + self._max_delay)
                if now >= ready_at:
                    self._pending = _Pending()
                    return pending
                self._cond.wait(ready_at - now)
            return None

    def _process(self, batch: _Pending) -> None:
        if batch.rearm:
            self._arm(batch.stale)
        elif batch.repack:
            self._arm_packages(batch.repack, batch.stale)
        full = batch.full
        if batch.policy and self._policy_file is not None:
            reloaded = self._reload_policy()
            if reloaded:
                self._arm()  # the limits may have changed, and with them what discovery reads
            full = reloaded or full
            if not full and not batch.changes and not batch.trust:
                return
        current = self._store.current
        try:
            snap = self._loader.rebuild(None if full else batch.changes, generation=current.generation + 1)
        except Exception as exc:
            self._failed(exc)
            return
        with self._cond:
            self._builds += 1
            self._retry_delay = self._retry_base
            self._retry_at = None  # this build already did what a retry would
        if snap.id != self._store.current.id:
            self._store.publish(snap)

    def _reload_policy(self) -> bool:
        """Load the changed policy file. True when the loader now uses it (rebuild everything)."""
        path = self._policy_file
        if path is None:
            return False
        if os.path.exists(path):
            try:
                effective = read_policy(path)
            except PolicyError as exc:
                self._report(WatchCode.POLICY_INVALID, f"{exc.diagnostics()}; keeping the policy in use")
                return False
        else:
            # what a cold start without the file loads: the built-in defaults under the managed
            # policy, if any (never the old, maybe looser, policy)
            try:
                effective = managed_defaults()
            except PolicyError as exc:
                self._report(WatchCode.POLICY_INVALID, f"{exc.diagnostics()}; keeping the policy in use")
                return False
            self._report(
                WatchCode.POLICY_REMOVED, f"policy file {path} was removed; now using the built-in default policy"
            )
        policy, file, overridden = effective.policy, effective.file, effective.overridden
        config = self._loader.config
        if policy == config.policy and file == config.policy_file and overridden == config.policy_overridden:
            return False
        self._loader.reconfigure(replace(config, policy=policy, policy_file=file, policy_overridden=overridden))
        log.info("policy %s reloaded", path)
        if self._on_policy is not None:
            self._on_policy(policy)  # e.g. Registry.update_policy: enforcement follows the file too
        return True

    def _failed(self, exc: BaseException) -> None:
        with self._cond:
            self._failures += 1
            delay = self._retry_delay
            self._retry_delay = min(self._retry_delay * 2, _MAX_RETRY_S)
            self._retry_at = time.monotonic() + delay
        message = getattr(exc, "diagnostics", None)
        text = message() if callable(message) else f"{type(exc).__name__}: {exc}"
        log.warning("rebuild failed, keeping generation %d: %s", self._store.current.generation, text)
        self._report(WatchCode.BUILD_FAILED, f"{text}; keeping the last good snapshot, retrying in {delay:g} s")

    def _report(self, code: WatchCode, message: str) -> None:
        problem = WatchProblem(code, message, self._store.current.generation)
        with self._cond:
            self._last_problem = problem
        if self._on_problem is not None:
            try:
                self._on_problem(problem)
            except Exception:
                log.exception("watch problem callback failed")


def root_packages(root: str, limits: Limits) -> list[str] | None:
    """The tool folders directly under ``root`` as discovery lists them (no dot names, no links),
    sorted; None when the root has more than ``max_root_entries`` entries (nothing is loaded
    from it, so nothing in it is watched)."""
    found: list[str] = []
    try:
        with os.scandir(root) as entries:
            for count, entry in enumerate(entries, start=1):
                if count > limits.max_root_entries:
                    return None
                if not is_hidden(entry.name) and entry_kind(entry) is EntryKind.DIR:  # as list_packages
                    found.append(entry.path)
    except OSError:
        return []
    found.sort()
    return found


def package_folders(pkg: str, limits: Limits, cap: int) -> tuple[list[tuple[str, tuple[int, int]]], bool]:
    """The folders discovery reads in the package ``pkg``, parents first, with their identity:
    the package folder and its folders down to ``max_package_depth`` (the package folder is
    depth 1, as in discovery), never below a folder with more than ``max_package_files`` entries
    (discovery refuses it) and never through a link; at most ``cap`` of them.
    Returns (folders, complete): complete is False when ``cap`` cut the list short."""
    ident = _identity(pkg, follow=False)
    if ident is None or cap <= 0:
        return [], ident is None
    out = [(pkg, ident)]
    queue: deque[tuple[str, int]] = deque([(pkg, 1)])
    while queue:
        folder, depth = queue.popleft()
        if depth >= limits.max_package_depth:
            continue  # deeper folders are refused (too-deep); this folder's own watch sees them appear
        children: list[str] = []
        try:
            with os.scandir(folder) as entries:
                for count, entry in enumerate(entries, start=1):
                    if count > limits.max_package_files:
                        children = []  # discovery stops here (too-many-entries): do not descend
                        break
                    if entry.is_dir(follow_symlinks=False):
                        children.append(entry.path)
        except OSError:
            continue
        for child in sorted(children):
            child_ident = _identity(child, follow=False)
            if child_ident is None:
                continue
            if len(out) >= cap:
                return out, False
            out.append((child, child_ident))
            queue.append((child, depth + 1))
    return out, True


def _identity(path: str, *, follow: bool) -> tuple[int, int] | None:
    try:
        st = os.stat(path, follow_symlinks=follow)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return None
    return (st.st_dev, st.st_ino)
