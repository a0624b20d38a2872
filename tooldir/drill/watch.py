"""watch:exhaust — run the watcher over the arena and count the inotify watches it holds.

A :class:`tooldir.snapshot.watch.Watcher` is started on exactly what ``tooldir watch`` would watch in the
arena (default user root, the project, the user's policy and state). The drill counts the inotify
watches this process gained (the ``inotify wd:`` lines of ``/proc/self/fdinfo`` of every inotify
descriptor), which must stay within the scenario's bound however many folders the project planted,
and then proves the watcher still works: a file of a good tool is edited and the new digest must
be published, then the edit is undone and the original digest must come back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._internal.inotify import inotify_watches
from ..model import BuiltinSpec
from ..policy import Policy
from ..snapshot.loader import Loader, make_config
from ..snapshot.store import Snapshot
from .execute import need
from .plant import Arena


@dataclass(slots=True)
class WatchReport:
    watches: int = 0
    picked_up: bool = False
    problems: list[str] = field(default_factory=list)

    def describe(self) -> str:
        edit = "edit picked up" if self.picked_up else "edit not picked up"
        return f"watcher held {self.watches} inotify watch(es); {edit}"


def _digest(snapshot: Snapshot, tool: str) -> str | None:
    return next((t.digest for t in snapshot.tools if t.name == tool), None)


def run_watch(
    arena: Arena,
    policy: Policy,
    builtins: tuple[BuiltinSpec, ...],
    *,
    max_inotify_watches: int,
    edit: str | None,
    tool: str | None,
    settle_s: float,
) -> WatchReport:
    watcher_cls: Any = need("snapshot.watch", "Watcher")
    store_cls: Any = need("snapshot.store", "SnapshotStore")
    config = make_config(project=".", user_dirs=None, policy=policy, state_dir=None, builtins=builtins)
    loader = Loader(config)
    store = store_cls(loader.load())
    report = WatchReport()
    before = inotify_watches()
    watcher = watcher_cls(loader, store, debounce_s=0.02)
    watcher.start()
    try:
        report.watches = inotify_watches() - before
        if report.watches > max_inotify_watches:
            report.problems.append(
                f"the watcher holds {report.watches} inotify watches, more than the bound {max_inotify_watches}"
            )
        if edit is not None and tool is not None:
            fs, where = arena.fs, "watch.edit"
            path = arena.resolve(edit, where)
            original = fs.read(path, where)
            old = _digest(store.current, tool)
            try:
                fs.write(path, original + b"\n# edited by the drill\n", where)
                watcher.wait_for(lambda s: _digest(s, tool) not in (None, old), settle_s)
                fs.write(path, original, where)
                watcher.wait_for(lambda s: _digest(s, tool) == old, settle_s)
                report.picked_up = True
            except TimeoutError:
                report.problems.append(f"the watcher did not publish the edit of {edit} within {settle_s} s")
            finally:
                fs.write(path, original, where)
    finally:
        watcher.stop(timeout=10)
    return report
