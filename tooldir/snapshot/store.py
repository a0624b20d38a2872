"""Snapshot: one immutable, content-identified view of every tool; SnapshotStore swaps them
atomically; SnapshotDiff says what changed between two."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter, itemgetter
from types import MappingProxyType
from typing import Any

from ..model import Diagnostic, Source, Status, ToolRecord, is_runnable


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
    #: content fingerprint of each record of ``tools`` (same order); lets ``diff`` skip unchanged records
    fingerprints: tuple[bytes, ...] = field(default=(), repr=False, compare=False)

    def get(self, name: str) -> ToolRecord | None:
        return self.by_name.get(name)

    def active(self) -> list[ToolRecord]:
        return [t for t in self.by_name.values() if is_runnable(t)]

    def records(self, name: str) -> list[ToolRecord]:
        return [t for t in self.tools if t.name == name]

    def to_json(self, deferred: Callable[[str], bool] | None = None) -> dict[str, Any]:
        """``deferred`` of each tool is the deferral plan's answer (``plan.is_deferred``; absent
        without one): see :meth:`ToolRecord.to_json`."""
        return {
            "snapshot": {"id": self.id, "generation": self.generation},
            "tools": [t.to_json(deferred) for t in self.tools],
            "diagnostics": [d.to_json() for d in self.diagnostics],
        }


_LIVE = (Status.ACTIVE, Status.PENDING)


@dataclass(frozen=True, slots=True)
class RecordEntry:
    """One record with what assembling a snapshot needs, computed once: its sort key (name, source
    precedence, path, fingerprint), its content fingerprint, and its diagnostics as ``DiagEntry``.

    The loader keeps entries of unchanged packages between builds, so an incremental build only
    fingerprints what changed."""

    key: tuple[str, int, str, bytes]
    record: ToolRecord
    diags: tuple[DiagEntry, ...]

    @property
    def fingerprint(self) -> bytes:
        return self.key[3]


#: (sort key ending with the diagnostic's fingerprint, diagnostic)
DiagEntry = tuple[tuple[str, str, str, str, str, bytes], Diagnostic]


# Fingerprints hash the ``repr`` of a tuple of the fields ``to_json`` shows, in a fixed order:
# str / None / bool / int reprs are unambiguous, so equal fingerprints mean equal JSON views, and
# a repr costs a fraction of a key-sorted ``json.dumps`` (one per record on every cold load).
# Enums are turned into their plain string values first, so the text is stable across processes.


def _digest(parts: tuple[object, ...]) -> bytes:
    return hashlib.sha256(repr(parts).encode("utf-8", "surrogatepass")).digest()


def diag_entry(d: Diagnostic) -> DiagEntry:
    view = (
        "diag-v1", d.severity.value, str(d.code), d.tool, None if d.source is None else d.source.value, d.path,
        d.pointer, d.message,
    )  # fmt: skip
    return ((d.path or "", d.tool or "", d.code, d.pointer or "", d.message, _digest(view)), d)


def record_entry(t: ToolRecord) -> RecordEntry:
    view = (
        "record-v1", t.name, t.source.value, t.path, t.status.value, t.trust.method, t.digest,
        None if t.risk is None else t.risk.value, t.defer_candidate,
    )  # fmt: skip
    return RecordEntry(
        (t.name, t.source.rank, t.path or "", _digest(view)),
        t,
        tuple([diag_entry(d) for d in t.diagnostics]) if t.diagnostics else (),
    )


_ENTRY_KEY = attrgetter("key")
_DIAG_KEY = itemgetter(0)


def assemble(entries: Iterable[RecordEntry], extra: Iterable[DiagEntry], generation: int) -> Snapshot:
    """Build a snapshot from prepared entries. The id is a sha256 over the fingerprints of every
    record and diagnostic in their (content-determined) order: equal content, equal id, however
    the entries were produced."""
    ordered = sorted(entries, key=_ENTRY_KEY)
    tools = tuple([e.record for e in ordered])
    diag_entries = list(extra)
    diag_entries.extend(chain.from_iterable([e.diags for e in ordered if e.diags]))
    diag_entries.sort(key=_DIAG_KEY)
    digest = hashlib.sha256(b"tooldir-snapshot-v2\n")
    fingerprints = tuple([e.fingerprint for e in ordered])
    digest.update(b"".join(fingerprints))
    digest.update(b"\n")
    digest.update(b"".join([k[5] for k, _ in diag_entries]))
    # a server package (server.json) is never offered itself: its tools are (DESIGN §10)
    by_name = {t.name: t for t in tools if t.status in _LIVE and t.server is None}
    return Snapshot(
        id="snap-" + digest.hexdigest()[:16],
        generation=generation,
        tools=tools,
        diagnostics=tuple([d for _, d in diag_entries]),
        by_name=MappingProxyType(by_name),
        fingerprints=fingerprints,
    )


def build_snapshot(records: Iterable[ToolRecord], extra: Iterable[Diagnostic], generation: int) -> Snapshot:
    """A snapshot of ``records`` plus the diagnostics ``extra`` that belong to no record.

    ``tools`` is sorted by (name, source precedence, path); ``diagnostics`` by (path, tool, code,
    pointer, message); ``by_name`` holds the one live (active or pending) record of each name."""
    return assemble([record_entry(t) for t in records], [diag_entry(d) for d in extra], generation)


def with_generation(snapshot: Snapshot, generation: int) -> Snapshot:
    return Snapshot(
        snapshot.id, generation, snapshot.tools, snapshot.diagnostics, snapshot.by_name, snapshot.fingerprints
    )


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
    # Only records whose content fingerprint is not in the other snapshot need keying and comparing.
    gone, came = _unmatched(old, new)
    before = {_key(t): t for t in gone}
    after = {_key(t): t for t in came}
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


def _unmatched(old: Snapshot, new: Snapshot) -> tuple[list[ToolRecord], list[ToolRecord]]:
    """(records of ``old`` with no identical record in ``new``, and the other way round)."""
    if len(old.fingerprints) == len(old.tools) and len(new.fingerprints) == len(new.tools):
        before, after = set(old.fingerprints), set(new.fingerprints)
        gone, came = before - after, after - before
        if not gone and not came:
            return [], []
        old_index = dict(zip(old.fingerprints, old.tools, strict=True)) if gone else {}
        new_index = dict(zip(new.fingerprints, new.tools, strict=True)) if came else {}
        return [old_index[f] for f in gone], [new_index[f] for f in came]
    # hand-built snapshots without fingerprints: compare objects
    old_ids, new_ids = {id(t) for t in old.tools}, {id(t) for t in new.tools}
    return [t for t in old.tools if id(t) not in new_ids], [t for t in new.tools if id(t) not in old_ids]


Subscriber = Callable[[Snapshot, SnapshotDiff], None]

_log = logging.getLogger("tooldir.snapshot")


class SnapshotStore:
    """Holds the current snapshot. ``publish`` is one reference swap under a lock; readers take
    ``current`` once per operation and so see a whole snapshot, old or new, never a mix.

    Subscribers are called after the swap, in the publishing thread, one publication at a time, so
    each receives every diff in generation order. A subscriber that raises is logged and skipped;
    it never stops the others or the publisher. Publishing from inside a subscriber is refused
    (it would deliver diffs out of order)."""

    def __init__(self, initial: Snapshot) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._publishing = threading.Lock()  # serialises publish + notify, so diffs arrive in order
        self._notifying = threading.local()
        self._current = initial
        self._subscribers: list[Subscriber] = []
        self._extend: Callable[[Snapshot], Snapshot] | None = None

    @property
    def current(self) -> Snapshot:
        return self._current

    def subscribe(self, fn: Subscriber) -> Callable[[], None]:
        """Call ``fn(snapshot, diff)`` after every publication; returns a function that unsubscribes."""
        with self._lock:
            self._subscribers.append(fn)

        def unsubscribe() -> None:
            with self._lock:
                if fn in self._subscribers:
                    self._subscribers.remove(fn)

        return unsubscribe

    def extend_with(self, fn: Callable[[Snapshot], Snapshot]) -> Callable[[], None]:
        """Pass every snapshot published from now on through ``fn`` before it is swapped in (the
        upstream hub adds its servers' tools: a reload must never be visible without them, even
        for a moment); returns a function that removes it. One at a time. ``fn`` runs in the
        publishing thread and must not publish; if it raises, the snapshot is published as given.
        An extended snapshot equal to the current one (same id) is not published."""
        with self._lock:
            if self._extend is not None:
                raise RuntimeError("this SnapshotStore already extends what is published")
            self._extend = fn

        def remove() -> None:
            with self._lock:
                if self._extend is fn:
                    self._extend = None

        return remove

    def publish(self, snapshot: Snapshot) -> tuple[Snapshot, SnapshotDiff]:
        """Swap in ``snapshot`` (passed through :meth:`extend_with`'s function, if any) with the
        next generation number; notify subscribers."""
        if getattr(self._notifying, "active", False):
            raise RuntimeError("SnapshotStore.publish called from a subscriber; publish from another thread")
        with self._publishing:
            extend = self._extend
            if extend is not None:
                self._notifying.active = True  # it must not publish (the lock is not re-entrant)
                try:
                    snapshot = extend(snapshot)
                except Exception:
                    _log.exception("extending the snapshot to publish failed; it is published as given")
                finally:
                    self._notifying.active = False
                if snapshot.id == self._current.id:  # the extension made it what is already current
                    return self._current, diff(self._current, self._current)
            with self._lock:
                old = self._current
                new = with_generation(snapshot, old.generation + 1)
                self._current = new
                subscribers = list(self._subscribers)
                self._changed.notify_all()
            change = diff(old, new)
            self._notifying.active = True
            try:
                for fn in subscribers:
                    try:
                        fn(new, change)
                    except Exception:
                        _log.exception("snapshot subscriber %r failed on generation %d", fn, new.generation)
            finally:
                self._notifying.active = False
        return new, change

    def wait_for(self, predicate: Callable[[Snapshot], bool], timeout: float) -> Snapshot:
        """Block until the current snapshot satisfies ``predicate`` (checked now and after every
        publication) and return it.

        Raises:
            TimeoutError: ``timeout`` seconds passed first.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                snap = self._current
                if predicate(snap):
                    return snap
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"no snapshot satisfied the condition within {timeout} s (at generation {snap.generation})"
                    )
                self._changed.wait(left)

    def wait_for_generation(self, generation: int, timeout: float) -> Snapshot:
        """Block until a snapshot of at least ``generation`` is current (bounded by ``timeout``)."""
        return self.wait_for(lambda s: s.generation >= generation, timeout)
