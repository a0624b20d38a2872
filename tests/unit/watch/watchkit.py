"""Helpers for watcher tests: a reference cold load built stage by stage (no Loader caches),
snapshot consistency checks, and a watcher over temporary roots."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from tooldir.drill.checks import cpu_seconds  # this process (the watcher among its threads) and reaped children
from tooldir.model import Diagnostic, Status
from tooldir.policy import Policy
from tooldir.read.discover import list_packages, open_root, overfull_root, package_digest, scan_package
from tooldir.read.validate import validate_package
from tooldir.snapshot.loader import LoadConfig, Loader, make_config
from tooldir.snapshot.resolve import Assessed, resolve
from tooldir.snapshot.store import Snapshot, SnapshotStore, assemble, build_snapshot, diag_entry, record_entry
from tooldir.snapshot.watch import Watcher, WatchProblem
from tooldir.state import load_approvals
from tooldir.trust.assess import TrustInputs, assess

WAIT_S = 15.0  # bound on every wait for the watcher
T = TypeVar("T")


def reference_snapshot(config: LoadConfig, now: datetime | None = None) -> Snapshot:
    """What a cold load of ``config`` must produce: discover, validate, assess and resolve every
    package in one pass (one ``resolve`` over everything), with no caching of any kind."""
    now = now or datetime.now(UTC)
    policy = config.policy
    candidates = []
    extra: list[Diagnostic] = []
    for root in config.roots:
        fd, diags = open_root(root)
        extra.extend(diags)
        if fd is None:
            continue
        try:
            listed = list_packages(fd, root, policy.limits)
            if listed is None:
                extra.append(overfull_root(root, policy.limits.max_root_entries))
                continue
            names, more = listed
            extra.extend(more)
            candidates.extend(validate_package(scan_package(fd, root, n, policy.limits), policy) for n in names)
        finally:
            os.close(fd)
    check = config.signature_check(policy, config.state_dir, now) if config.signature_check else None
    inputs = TrustInputs(policy, load_approvals(config.state_dir), now, check)
    records = resolve([Assessed(c, assess(c, inputs)) for c in candidates], config.builtins, policy)
    return build_snapshot(records, extra, 1)


def check_consistent(snap: Snapshot, *, recompute_id: bool = True) -> None:
    """Invariants every published snapshot keeps, whatever is happening on disk."""
    for record in snap.tools:
        if record.digest is not None:
            assert record.digest == package_digest(record.files), record.path
    keys = [(t.name, t.source.rank, t.path or "") for t in snap.tools]
    assert keys == sorted(keys)
    live = [t for t in snap.tools if t.status in (Status.ACTIVE, Status.PENDING)]
    assert list(snap.by_name) == [t.name for t in live]
    for name, record in snap.by_name.items():
        assert record.name == name
        assert any(t is record for t in snap.tools)
    if not recompute_id:
        return
    # the id is derived from the content: recomputing it from the parts gives the same id
    rebuilt = assemble(
        [record_entry(t) for t in snap.tools],
        [diag_entry(d) for d in snap.diagnostics if not any(d in t.diagnostics for t in snap.tools)],
        snap.generation,
    )
    assert rebuilt.id == snap.id


def config_for(
    tmp_path: Path, *, project: Path | None = None, user: list[Path] | None = None, policy: Policy | None = None
) -> LoadConfig:
    return make_config(project=project, user_dirs=user or [], policy=policy, state_dir=tmp_path / "state")


class Problems(list[WatchProblem]):
    """The problems a watcher reported; ``wait_until`` blocks on a condition, never polls."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = threading.Condition()

    def append(self, problem: WatchProblem) -> None:
        with self._changed:
            super().append(problem)
            self._changed.notify_all()

    def wait_until(self, predicate: Callable[[list[WatchProblem]], bool], timeout: float = WAIT_S) -> None:
        def wait(slice_s: float) -> None:
            with self._changed:
                if not self._changed.wait_for(lambda: predicate(self), slice_s):
                    raise TimeoutError(f"no such problem reported in time: {[p.code for p in self]}")

        patiently(wait, timeout)


SLICE_S = 0.5


def patiently(wait: Callable[[float], T], timeout: float) -> T:
    """``wait(slice)`` again and again until it returns: ``timeout`` is CPU seconds of this
    process spent without the awaited event (a watcher that spends that much is stuck, not slow),
    with a wall backstop of ten times as much (a loaded 2-core machine may give it a tenth of a
    core). The last TimeoutError says how long was waited."""
    started, cpu_at_start = time.monotonic(), cpu_seconds()
    while True:
        try:
            return wait(SLICE_S)
        except TimeoutError as exc:
            used, took = cpu_seconds() - cpu_at_start, time.monotonic() - started
            if used >= timeout or took >= 10 * timeout:
                raise TimeoutError(f"{exc} (waited {took:.1f} s wall, {used:.1f} s of CPU time)") from None


@contextmanager
def watching(config: LoadConfig, **kwargs: object) -> Iterator[tuple[Watcher, Problems]]:
    loader = Loader(config)
    store = SnapshotStore(loader.load())
    problems = Problems()
    kwargs.setdefault("debounce_s", 0.02)
    watcher = Watcher(loader, store, on_problem=problems.append, **kwargs)  # type: ignore[arg-type]
    with watcher:
        yield watcher, problems


def settles_to_cold_load(watcher: Watcher, config: LoadConfig, timeout: float = WAIT_S) -> Snapshot:
    """Wait (bounded) until the watcher's snapshot equals a cold load of the same directories."""
    want = reference_snapshot(config).id
    return patiently(lambda slice_s: watcher.wait_for(lambda s: s.id == want, slice_s), timeout)
