"""watch:storm — churn a tool tree while the watcher rebuilds and readers read.

A writer makes thousands of changes to ``packages`` generated tool folders (rewrites, atomic
schema replacements, folders renamed away and back mid-scan, deletions and re-creations) while a
:class:`tooldir.snapshot.watch.Watcher` keeps a ``SnapshotStore`` current and a reader thread takes
``store.current`` in a tight loop. The drill then checks that every snapshot a reader saw was whole
(its owner index agrees with its tool list, generations never went backwards, nothing raised) and
that, once the storm is over, the watcher converges to exactly what a cold load sees.
"""

from __future__ import annotations

import json
import os
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

from ..model import BuiltinSpec, Status
from ..policy import Policy
from ..snapshot.loader import Loader, make_config
from ..snapshot.store import Snapshot
from .execute import need
from .plant import Arena, write_control

STORM_PREFIX = "storm_"


@dataclass(slots=True)
class StormReport:
    changes: int = 0
    reads: int = 0
    generations: int = 0
    problems: list[str] = field(default_factory=list)
    converged: bool = False
    seconds: float = 0.0

    def describe(self) -> str:
        state = "converged" if self.converged else "did not converge"
        return (
            f"storm: {self.changes} changes, {self.reads} reads over {self.generations} generations, "
            f"{state} in {self.seconds:.1f} s"
        )


def storm_name(i: int) -> str:
    return f"{STORM_PREFIX}{i:03d}"


def plant_storm(arena: Arena, packages: int) -> None:
    root = arena.resolve("project/.tooldir/tools")
    for i in range(packages):
        write_control(arena.fs, root / storm_name(i), storm_name(i))


def whole(snapshot: Snapshot) -> str | None:
    """Why ``snapshot`` is not internally consistent, or None."""
    owners = {t.name: t for t in snapshot.tools if t.status in (Status.ACTIVE, Status.PENDING)}
    if dict(snapshot.by_name) != owners:
        return f"generation {snapshot.generation}: by_name disagrees with the tool list"
    keys = [(t.name, t.source, t.path) for t in snapshot.tools]
    if len(keys) != len(set(keys)):
        return f"generation {snapshot.generation}: a tool appears twice"
    return None


def _signature(snapshot: Snapshot) -> list[tuple[str, str, str, str | None]]:
    return [(t.name, str(t.source), str(t.status), t.digest) for t in snapshot.tools]


def run_storm(
    arena: Arena, policy: Policy, builtins: tuple[BuiltinSpec, ...], *, packages: int, changes: int, settle_s: float
) -> StormReport:
    watcher_cls = need("snapshot.watch", "Watcher")
    store_cls = need("snapshot.store", "SnapshotStore")
    config = make_config(project=".", user_dirs=None, policy=policy, state_dir=None, builtins=builtins)
    loader = Loader(config)
    store = store_cls(loader.load())
    report = StormReport()
    stop = threading.Event()
    started = time.monotonic()

    def read() -> None:
        last = 0
        seen: set[int] = set()
        while not stop.is_set():
            try:
                snap = store.current
                report.reads += 1
                if snap.generation < last:
                    report.problems.append(f"generation went back from {last} to {snap.generation}")
                last = snap.generation
                if snap.generation not in seen:
                    seen.add(snap.generation)
                    problem = whole(snap)
                    if problem:
                        report.problems.append(problem)
            except Exception as exc:
                report.problems.append(f"reader raised {type(exc).__name__}: {exc}")
            time.sleep(0.001)  # a tight loop, but one that leaves the GIL to the watcher
        report.generations = len(seen)

    problems: list[str] = []
    watcher = watcher_cls(loader, store, debounce_s=0.02, max_delay_s=0.5, on_problem=lambda p: problems.append(p.code))
    reader = threading.Thread(target=read, name="drill-storm-reader", daemon=True)
    with warnings.catch_warnings():
        # watchdog warns from its observer thread when a watched folder is re-created under the
        # same path ("Callback with id ... already exists"); it is benign library noise, and under
        # warnings-as-errors it would kill the observer thread. Reported to the watcher's owner.
        warnings.filterwarnings("ignore", message="Callback with id", category=RuntimeWarning)
        watcher.start()
        reader.start()
        try:
            report.changes = _churn(arena, packages, changes)
            expected = _signature(Loader(config).load())
            try:
                watcher.wait_for(lambda s: _signature(s) == expected, settle_s)
                report.converged = True
            except TimeoutError:
                report.problems.append(f"the watcher did not reach the cold-load view within {settle_s} s")
        finally:
            stop.set()
            reader.join(10)
            watcher.stop(timeout=10)
    report.seconds = time.monotonic() - started
    if problems:
        report.problems.append(f"(watcher reported, kept the old snapshot: {', '.join(sorted(set(problems)))})")
        if report.converged:
            report.problems.pop()  # reported and recovered from: not a failure
    return report


def _churn(arena: Arena, packages: int, changes: int) -> int:
    """Deterministic churn: every change is one of five kinds, round robin over the packages,
    which must be the arena's own folders (reached without a link: the churn works by path)."""
    fs = arena.fs
    root = arena.resolve("project/.tooldir/tools")
    for i in range(packages):
        fs.require_folder(root / storm_name(i), "storm")
    done = 0
    for i in range(changes):
        name = f"{STORM_PREFIX}{i % packages:03d}"
        pkg = root / name
        kind = i % 5
        try:
            if kind == 0:  # rewrite the script in place
                (pkg / "run.py").write_text(f"print({i})\n")
            elif kind == 1:  # atomic schema replacement
                data: dict[str, Any] = json.loads((pkg / "schema.json").read_text())
                data["description"] = f"Echo the given text back (revision {i})."
                tmp = pkg / f".schema.{i}.tmp"
                tmp.write_text(json.dumps(data))
                os.replace(tmp, pkg / "schema.json")
            elif kind == 2:  # rename away and back (a race with a scan in progress)
                away = root / f".{name}.moving"
                os.rename(pkg, away)
                os.rename(away, pkg)
            elif kind == 3:  # a stray file appears and disappears
                extra = pkg / "notes.txt"
                extra.write_text(str(i))
                if i % 2:
                    extra.unlink()
            else:  # delete and re-create the whole package
                tmp_dir = root / f".{name}.old"
                os.rename(pkg, tmp_dir)
                write_control(fs, pkg, name)
                for leftover in tmp_dir.iterdir():
                    leftover.unlink()
                tmp_dir.rmdir()
        except OSError:
            continue
        done += 1
    return done
