"""Snapshot: one immutable, content-identified view of every tool; SnapshotStore swaps them
atomically; SnapshotDiff says what changed between two."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .model import Diagnostic, Source, Status, ToolRecord

_ORDER = {Status.ACTIVE: 0, Status.PENDING: 1, Status.SHADOWED: 2, Status.REJECTED: 3}


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every tool found in one load, whatever its status, and every diagnostic.

    ``tools`` is sorted by (name, source precedence, path). ``by_name`` maps each name to the one
    record that owns it (active or pending; never shadowed or rejected).
    """

    id: str
    generation: int
    tools: tuple[ToolRecord, ...]
    diagnostics: tuple[Diagnostic, ...]
    by_name: Mapping[str, ToolRecord] = field(repr=False)

    def get(self, name: str) -> ToolRecord | None:
        return self.by_name.get(name)

    def active(self) -> list[ToolRecord]:
        return [t for t in self.by_name.values() if t.status is Status.ACTIVE]

    def records(self, name: str) -> list[ToolRecord]:
        return [t for t in self.tools if t.name == name]

    def to_json(self) -> dict[str, Any]:
        return {
            "snapshot": {"id": self.id, "generation": self.generation},
            "tools": [t.to_json() for t in self.tools],
            "diagnostics": [d.to_json() for d in self.diagnostics],
        }


def build_snapshot(records: Iterable[ToolRecord], extra: Iterable[Diagnostic], generation: int) -> Snapshot:
    tools = tuple(sorted(records, key=lambda t: (t.name, t.source.rank, t.path or "")))
    diags: list[Diagnostic] = list(extra)
    for t in tools:
        diags.extend(t.diagnostics)
    diags.sort(key=lambda d: (d.path or "", d.tool or "", d.code, d.pointer or "", d.message))
    owners: dict[str, ToolRecord] = {}
    for t in tools:
        if t.status in (Status.ACTIVE, Status.PENDING):
            owners[t.name] = t
    digest = hashlib.sha256()
    for t in tools:
        digest.update(json.dumps(t.to_json(), sort_keys=True).encode())
    for d in diags:
        digest.update(json.dumps(d.to_json(), sort_keys=True).encode())
    return Snapshot(
        id="snap-" + digest.hexdigest()[:16],
        generation=generation,
        tools=tools,
        diagnostics=tuple(diags),
        by_name=MappingProxyType(dict(sorted(owners.items()))),
    )


def with_generation(snapshot: Snapshot, generation: int) -> Snapshot:
    return Snapshot(snapshot.id, generation, snapshot.tools, snapshot.diagnostics, snapshot.by_name)


Key = tuple[str, Source, str]  # (name, source, path)


def _key(t: ToolRecord) -> Key:
    return (t.name, t.source, t.path or "")


@dataclass(frozen=True, slots=True)
class SnapshotDiff:
    """What changed from ``old`` to ``new``: records keyed by (name, source, path)."""

    old_generation: int
    new_generation: int
    added: tuple[ToolRecord, ...]
    removed: tuple[ToolRecord, ...]
    changed: tuple[tuple[ToolRecord, ToolRecord], ...]  # digest changed
    status_changed: tuple[tuple[ToolRecord, ToolRecord], ...]  # same digest, status or trust changed

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed or self.status_changed)

    def to_json(self) -> dict[str, Any]:
        def brief(t: ToolRecord) -> dict[str, Any]:
            return {
                "name": t.name,
                "source": str(t.source),
                "path": t.path,
                "status": str(t.status),
                "digest": t.digest,
            }

        return {
            "added": [brief(t) for t in self.added],
            "removed": [brief(t) for t in self.removed],
            "changed": [
                {
                    "name": n.name,
                    "source": str(n.source),
                    "path": n.path,
                    "old_digest": o.digest,
                    "new_digest": n.digest,
                    "status": str(n.status),
                }
                for o, n in self.changed
            ],
            "status_changed": [
                {"name": n.name, "source": str(n.source), "path": n.path, "old": str(o.status), "new": str(n.status)}
                for o, n in self.status_changed
            ],
        }


def diff(old: Snapshot, new: Snapshot) -> SnapshotDiff:
    before = {_key(t): t for t in old.tools}
    after = {_key(t): t for t in new.tools}
    added = tuple(after[k] for k in sorted(after.keys() - before.keys()))
    removed = tuple(before[k] for k in sorted(before.keys() - after.keys()))
    changed, status_changed = [], []
    for k in sorted(before.keys() & after.keys()):
        o, n = before[k], after[k]
        if o.digest != n.digest:
            changed.append((o, n))
        elif o.status is not n.status or o.trust != n.trust:
            status_changed.append((o, n))
    return SnapshotDiff(old.generation, new.generation, added, removed, tuple(changed), tuple(status_changed))


Subscriber = Callable[[Snapshot, SnapshotDiff], None]


class SnapshotStore:
    """Holds the current snapshot. ``publish`` is one reference swap under a lock; readers take
    ``current`` once per operation and so see a whole snapshot, old or new, never a mix."""

    def __init__(self, initial: Snapshot) -> None:
        self._lock = threading.Lock()
        self._publishing = threading.Lock()  # serialises publish + notify, so diffs arrive in order
        self._current = initial
        self._subscribers: list[Subscriber] = []

    @property
    def current(self) -> Snapshot:
        return self._current

    def subscribe(self, fn: Subscriber) -> Callable[[], None]:
        with self._lock:
            self._subscribers.append(fn)

        def unsubscribe() -> None:
            with self._lock:
                if fn in self._subscribers:
                    self._subscribers.remove(fn)

        return unsubscribe

    def publish(self, snapshot: Snapshot) -> tuple[Snapshot, SnapshotDiff]:
        """Swap in ``snapshot`` with the next generation number; notify subscribers."""
        with self._publishing:
            with self._lock:
                old = self._current
                new = with_generation(snapshot, old.generation + 1)
                self._current = new
                subscribers = list(self._subscribers)
            change = diff(old, new)
            for fn in subscribers:
                fn(new, change)
        return new, change
