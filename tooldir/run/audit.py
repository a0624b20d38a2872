"""The audit log: one JSON line per call and per denial, hash-chained, synced and byte-exact.

Every line carries ``seq`` (1, 2, ...), ``prev`` (the previous line's ``hash``; 64 zeros for the
first) and ``hash`` = sha256 over the canonical serialisation of the line without ``hash``. The
canonical serialisation (:func:`canonical`) is the only form ever written: compact separators,
sorted keys, ASCII only (every non-ASCII character as a lowercase ``\\uXXXX`` escape), no NaN or
Infinity. A line is valid only if its bytes *equal* the canonical serialisation of its parsed
content, parsed strictly (duplicate keys refused), so whitespace, key order, escapes and forged
duplicate keys are caught as well as edits, deletions and moves; :func:`verify` names the first
broken line and why (a stable ``code``).

Lines written before this format (``"v": 1``) were serialised the same way except that non-ASCII
characters were written raw (UTF-8); they are checked against that form.

Every free-text field is capped (:data:`TEXT_CAP` characters, :data:`REASON_CAP` for ``reason``);
a capped or repaired value (lone surrogates become U+FFFD) carries ``<field>_sha256`` (of the full
value, UTF-8 with surrogates passed through) and ``<field>_length`` (its length in characters). The
writer never raises on odd strings, only ``OSError`` when the log cannot be written.

The chain head (:class:`~tooldir.state.ChainHead`: the newest ``seq``, ``hash`` and the log size)
is kept beside the log in ``audit.head``, written atomically under the log's lock after every
line. The appender takes the next ``seq`` and ``prev`` from it (never from a bounded tail read, so
no line length can break the chain); a log without a head (written by an older version) is read
backwards to its last line once and the head created. :func:`verify` compares the log with the head
("N lines missing at the end"), and with a copy kept elsewhere (``expect_head``).

**Reservations** (issue 23 item 10: no tool starts unless its line is sure to be written).
Before a tool starts, :meth:`JsonlAudit.reserve` makes room for its line: under the log's lock it
allocates, past the end of the log and without changing its size (``fallocate`` with
``FALLOC_FL_KEEP_SIZE``), :data:`LINE_RESERVE` bytes for every reservation outstanding in every
process. Reservations are counted across processes by open-file-description locks on one byte each
of ``audit.reserve`` (a crashed process's reservations end with it). Every line is at most
:data:`LINE_RESERVE` bytes (all its fields are capped), so a reserved line is written into space
already allocated; an append without a reservation (a refusal: no tool ran) first extends the
allocation so the outstanding reservations stay covered, and is refused if it cannot. A file
system without ``fallocate`` (``EOPNOTSUPP``) gets an *intent line* instead: a line with
``status = "started"`` written (and synced) before the tool starts, which the outcome line names
(``intent``). When neither can be made the call is refused before the tool starts
(``audit-unavailable``).

Appends take an exclusive ``flock`` on the log so several processes (a CLI run beside
``tooldir serve``) keep one chain. Files are created 0600 in the user's state directory.

Durability: a call returns only once its line is on disk (``fdatasync``), and the head is written
only after the lines it names are synced. Calls that arrive while a sync is in flight are written
and synced together as one batch (group commit: one sync for all of them, see :class:`JsonlAudit`).
A new log gets a genesis head (seq 0) before its first line, so a crash at any point leaves either
a matching head or one that is merely behind (``head-behind``, a warning), never a torn chain.
The opt-in, reported weakenings (policy ``audit.durability``): ``interval`` -- lines are written
before their call returns and synced (then the head recorded) by a background thread within
``sync_interval_ms`` (50-200 ms) and at exit, so a power cut loses at most that last interval's
lines and the head never names an unsynced line; ``buffered`` -- never synced by tooldir. Their
lines carry ``durability`` (and ``sync_interval_ms``), and ``verify`` names it when lines follow
the head.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import dataclasses
import errno
import fcntl
import functools
import hashlib
import json
import logging
import math
import os
import re
import resource
import struct
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from .._internal.atomic import private_dirs
from .._internal.strictjson import StrictJSONError, canonical_json, loads
from ..codes import AuditCode, CallErrorCode, GateCode
from ..errors import StateError
from ..state import ChainHead, audit_head_path, load_chain_head, save_chain_head

AUDIT_FILE = "audit.jsonl"
GENESIS = "0" * 64
RECORD_VERSION = 2
TEXT_CAP = 256
"""Characters kept of every free-text field of a line (tool name, source, session, ...)."""
REASON_CAP = 1024
"""Characters kept of ``reason`` (the error code and message)."""
_CAPS = {"reason": REASON_CAP}
LINE_RESERVE = 32 * 1024
"""Bytes reserved in the log for one call's line before its tool starts: more than the longest
line can be (every field is capped; tests/unit/registry/test_audit_reserve.py builds the longest)."""
RESERVE_FILE = "audit.reserve"
"""Beside the log: one byte per outstanding reservation is locked (``F_OFD_SETLK``); never written."""
RESERVE_SLOTS = 1 << 16
"""At most this many reservations at once, all processes together."""
_MAX_LAST_LINE = 1 << 24  # a head-less log whose last line is longer than 16 MiB is treated as damaged
_MAX_INT = 1 << 53
_SURROGATE = re.compile("[\ud800-\udfff]")
log = logging.getLogger("tooldir")
_HEAD_TEXT = re.compile(r"^(?:(\d{1,18}):)?([0-9a-f]{64})$")


def canonical(value: Any) -> bytes:
    """The one serialisation of audit lines, for writing and for verifying.

    Raises:
        ValueError: a non-finite number (records are built so that this never happens).
    """
    return canonical_json(value, 2)


def _canonical_v1(value: Any) -> bytes:
    return canonical_json(value, 1)


#: the canonical JSON form (``tooldir._internal.strictjson.canonical_json``) of each record version
_SERIALISERS: dict[Any, Callable[[Any], bytes]] = {1: _canonical_v1, RECORD_VERSION: canonical}


def input_digest(value: Any) -> str:
    """sha256 of the canonical JSON of a tool input (inputs are never logged, only hashed)."""
    try:
        data = canonical_json(value, 1)
    except (TypeError, ValueError):
        data = repr(value).encode("utf-8", "replace")
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """What happened to one call. ``decision`` is ``allow`` or ``deny``; ``status`` is ``ok``,
    ``error`` or ``denied``."""

    tool: str
    source: str | None
    digest: str | None
    input_sha256: str
    decision: str
    reason: str | None
    status: str
    error_code: CallErrorCode | GateCode | None
    duration_ms: float
    snapshot: str | None = None
    session: str | None = None
    tool_sha256: str | None = None
    """sha256 of the requested name when ``tool`` is an escaped or capped form of it (else None,
    and the key is left out of the line)."""
    secrets: tuple[str, ...] = ()
    """The names (never the values) of the secrets given to the tool's run (DESIGN §11), written
    comma-separated (``"JIRA_TOKEN,GH_TOKEN"``); the key is left out of the line when none were."""
    network: Sequence[Mapping[str, Any]] | None = None
    """A run behind the egress proxy: its connections (host, port, address, bytes_up, bytes_down,
    refused); the key is left out of the line otherwise."""
    intent: str | None = None
    """The audit id of this call's intent line (written before the tool started, on a file system
    without ``fallocate``); else None, and the key is left out of the line."""

    def fields(self) -> dict[str, Any]:
        extra: dict[str, Any] = {} if self.tool_sha256 is None else {"tool_sha256": self.tool_sha256}
        if self.secrets:
            extra["secrets"] = ",".join(self.secrets)  # names hold no ','; a plain string, as every field
        if self.intent is not None:
            extra["intent"] = self.intent
        after = {} if self.network is None else {"network": list(self.network)}
        return {
            **extra,
            "tool": self.tool,
            "source": self.source,
            "digest": self.digest,
            "input_sha256": self.input_sha256,
            "decision": self.decision,
            "reason": self.reason,
            "status": self.status,
            "error_code": self.error_code,
            "duration_ms": self.duration_ms,
            "snapshot": self.snapshot,
            "session": self.session,
            **after,
        }


NETWORK_CAP = 64
"""Connections written into one audit line at most (``network_more`` counts the rest)."""
NETWORK_LINE_BYTES = 8 * 1024
"""Bytes of one line the connections may take at most (as written: escaped, compact), so that
the longest line still fits in :data:`LINE_RESERVE` (64 long refusals would not); the connections
past it are counted in ``network_more`` too."""


def bounded_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The fields as they are logged: strings capped and made encodable, with ``<field>_sha256``
    and ``<field>_length`` of any value that was changed; numbers finite (else null); anything else
    as its ``repr``. Never raises."""
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if value is None or type(value) is bool or (type(value) is int and abs(value) < _MAX_INT):
            out[key] = value
        elif isinstance(value, float):
            out[key] = round(value, 3) if math.isfinite(value) else None
        elif key == "network" and isinstance(value, list):  # the egress proxy's connections
            out[key] = kept = _bounded_network(value)
            if len(kept) < len(value):
                out["network_more"] = len(value) - len(kept)
        else:
            text = value if isinstance(value, str) else _repr(value)
            shown = _SURROGATE.sub("\ufffd", text[: _CAPS.get(key, TEXT_CAP)])
            out[key] = shown
            if shown != text:
                full = text.encode("utf-8", "surrogatepass")
                out[f"{key}_sha256"] = "sha256:" + hashlib.sha256(full).hexdigest()
                out[f"{key}_length"] = len(text)
    return out


def _bounded_network(connections: list[Any]) -> list[dict[str, Any]]:
    """The first connections, each bounded, while they are at most NETWORK_CAP and take at most
    NETWORK_LINE_BYTES of the line."""
    kept: list[dict[str, Any]] = []
    size = 0
    for connection in connections[:NETWORK_CAP]:
        if not isinstance(connection, Mapping):
            continue
        entry = bounded_fields(connection)
        size += len(canonical(entry)) + 1  # and its comma (the form the line is written in: ASCII)
        if size > NETWORK_LINE_BYTES:
            break
        kept.append(entry)
    return kept


def _repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception:
        return f"<unrepresentable {type(value).__name__}>"


class AuditSink(Protocol):
    def record(self, event: AuditEvent) -> str:
        """Persist one event; return its audit id. Raises OSError if it cannot be stored."""
        ...


class ReservingSink(AuditSink, Protocol):
    """A sink that can promise, before a tool starts, that the call's line will be stored
    (:class:`JsonlAudit`). The registry asks a sink that has ``reserve`` before every run."""

    def reserve(self, intent: AuditEvent) -> Reservation:
        """Make sure one more line can be stored, or raise OSError (nothing may start)."""
        ...

    def record_reserved(self, event: AuditEvent, reservation: Reservation) -> str:
        """Store the line ``reservation`` was made for, then release it."""
        ...


@dataclass(slots=True)
class Reservation:
    """Room for one line (``slot`` of ``audit.reserve``), or the id of the intent line written
    instead (``intent``). :meth:`JsonlAudit.release` ends it; releasing twice is a no-op."""

    slot: int | None
    intent: str | None = None
    released: bool = False


@dataclass(frozen=True, slots=True)
class _Known:
    head: ChainHead
    head_id: tuple[int, int, int]  # (inode, mtime ns, size) of the head file we wrote


@dataclass(slots=True)
class _Pending:
    """One line waiting for its group commit: its id and fields; then ``done`` or ``error``."""

    audit_id: str
    fields: dict[str, Any]
    reserved: bool = False  # its room was reserved ahead (its tool ran): written even on a full disk
    done: bool = False
    error: BaseException | None = None


#: Bounds of ``sync_interval_s`` (policy ``audit.sync_interval_ms``: 50 to 200 ms).
SYNC_INTERVAL_RANGE_S = (0.05, 0.2)


class JsonlAudit:
    """The hash-chained JSONL sink at ``<state_dir>/audit.jsonl``, head in ``audit.head``.

    **Group commit.** Lines that arrive together share one ``fdatasync``: the first caller writes
    its line and syncs; callers arriving meanwhile queue theirs, and the next of them to run writes
    the whole queue at once and syncs once for all of it. Every caller returns only once its own
    line is durable (``durable``) -- a single caller still pays one sync per line, concurrent ones
    share it. ``durable=False`` (policy ``audit.durability = "buffered"``, reported as weakening)
    leaves the sync to the kernel: a line survives a crash of tooldir but not of the machine.

    **Interval** (``sync_interval_s``, policy ``audit.durability = "interval"``, reported as
    weakening): every line is written (handed to the kernel) before its call returns, so it
    survives a crash of tooldir, and a background thread syncs the log at most ``sync_interval_s``
    after the first line not yet synced, then records the head -- the head only ever names synced
    lines. A power cut or OS crash loses at most the lines of that last interval and leaves the
    chain up to the head intact; ``verify`` reports lines after the head (``head-behind``, a
    warning, saying they were written under an interval). :meth:`flush` (also at exit and on
    :meth:`close`) syncs at once. Lines of the weakened modes carry ``durability`` (and
    ``sync_interval_ms``), so the log itself says how its lines were kept."""

    def __init__(
        self,
        path: Path,
        head_path: Path | None = None,
        *,
        durable: bool = True,
        sync_interval_s: float | None = None,
    ) -> None:
        self.path = Path(path)
        self.head_path = Path(head_path) if head_path is not None else audit_head_path(self.path)
        low, high = SYNC_INTERVAL_RANGE_S
        if sync_interval_s is not None and not low <= sync_interval_s <= high:
            raise ValueError(f"sync_interval_s must be between {low} and {high} s, not {sync_interval_s!r}")
        self.sync_interval_s = sync_interval_s
        self.durable = durable and sync_interval_s is None
        self._mode: dict[str, Any] = {}
        if sync_interval_s is not None:
            self._mode = {"durability": "interval", "sync_interval_ms": round(sync_interval_s * 1000)}
        elif not durable:
            self._mode = {"durability": "buffered"}
        self._known: _Known | None = None  # the log's end as this sink last wrote it (and the head file's id)
        self._queue: list[_Pending] = []
        self._committing = False  # a caller is writing (and syncing) a batch
        self._turn = threading.Condition(threading.Lock())
        self._unsynced_since: float | None = None  # interval: when the oldest unsynced line was written
        self._unsynced_ino: int | None = None  # ... and the log file it went to
        self._flusher: threading.Thread | None = None
        self._flush_lock = threading.Lock()
        self._closed = False
        self._reserve_lock = threading.Lock()
        self._reserve_fd: int | None = None  # audit.reserve, one open file description for this sink
        self._reserve_path = os.fspath(self.path.parent / RESERVE_FILE)
        self._reserve_close: weakref.finalize[Any, Any] | None = None
        self._slots: set[int] = set()  # the reservations this sink holds (their bytes locked on _reserve_fd)
        self._no_fallocate = False  # the log's file system has no fallocate: intent lines instead

    @classmethod
    def in_state_dir(cls, state_dir: Path, *, durable: bool = True, sync_interval_s: float | None = None) -> JsonlAudit:
        return cls(Path(state_dir) / AUDIT_FILE, durable=durable, sync_interval_s=sync_interval_s)

    # -- interval mode ---------------------------------------------------------------------------

    def flush(self) -> None:
        """Sync every line this sink wrote and record the head naming them (interval mode; a
        no-op otherwise, or when nothing is unsynced). The sync itself runs outside the log's lock,
        so calls go on appending meanwhile; the head is then recorded under the lock, only if it
        advances the recorded one. Raises OSError when the log cannot be synced."""
        if self.sync_interval_s is None:
            return
        with self._flush_lock:
            with self._turn:
                if self._unsynced_since is None:
                    return
                ino = self._unsynced_ino
            try:
                fd, _ = self._open_locked(create=False)
            except FileNotFoundError:  # the log was moved away: never re-created for a sync
                with self._turn:
                    self._unsynced_since = None
                return
            try:
                with self._turn:
                    known, self._unsynced_since = self._known, None
                if os.fstat(fd).st_ino != ino or known is None:
                    return  # the log was replaced (a new one started): its lines are not this one's
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.fdatasync(fd)  # every line up to known.head is now on disk
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    same = os.stat(self.path, follow_symlinks=False).st_ino == ino
                except FileNotFoundError:
                    same = False
                try:
                    recorded = load_chain_head(self.head_path)
                except StateError:
                    recorded = None
                if not same or (recorded is not None and recorded.seq >= known.head.seq):
                    return  # replaced meanwhile, or another writer recorded a later head
                # a log now shorter than we wrote (lines removed): this head makes verify report them
                save_chain_head(self.head_path, known.head, both=recorded is None)
                with self._turn:
                    if self._known is not None:  # the log's end as we wrote it is unchanged (we hold the lock)
                        self._known = _Known(self._known.head, _file_id(self.head_path) or (0, 0, 0))
            finally:
                os.close(fd)

    def close(self) -> None:
        """Flush (interval mode) and stop the background syncing; later lines are synced at once."""
        with self._turn:
            self._closed = True
            self._turn.notify_all()
        self.flush()

    def _dirty(self, ino: int) -> None:
        """Interval mode, under ``_turn``: lines were written; have them synced within the interval."""
        if self._unsynced_since is not None:
            return  # the flusher already has a deadline for these lines
        self._unsynced_since = time.monotonic()
        self._unsynced_ino = ino
        if self._flusher is None:
            self._flusher = threading.Thread(target=self._flush_loop, name="tooldir-audit-sync", daemon=True)
            self._flusher.start()
            _INTERVAL_SINKS.add(self)
        self._turn.notify_all()

    def _flush_loop(self) -> None:
        interval = self.sync_interval_s or SYNC_INTERVAL_RANGE_S[0]
        while True:
            with self._turn:
                if self._unsynced_since is None and not self._closed:
                    self._turn.wait(1.0)
                if self._unsynced_since is None:  # closed or idle: end (the next line starts another)
                    self._flusher = None
                    return
                delay = self._unsynced_since + interval - time.monotonic()
                if delay > 0 and not self._closed:
                    self._turn.wait(delay)
                    continue
            try:
                self.flush()
            except Exception as exc:  # the next line's commit tries again; never a dead flusher
                log.error("could not sync the audit log %s: %s", self.path, exc)
                time.sleep(interval)

    # -- reservations --------------------------------------------------------------------------

    def reserve(self, intent: AuditEvent) -> Reservation:
        """Make room for one more line before a tool starts (see the module's docstring). ``intent``
        is the line written first on a file system without ``fallocate``.

        Raises:
            OSError: the room cannot be made (a full disk, a read-only or vanished state dir, EIO,
                every slot taken): the tool must not start.
        """
        if self._no_fallocate:
            return Reservation(None, intent=self.record(intent))
        fd, size = self._open_locked()
        try:
            if size == 0 and not self.head_path.exists():
                # the genesis head first (it is written in place afterwards: no new blocks needed)
                save_chain_head(self.head_path, ChainHead(0, GENESIS, 0), both=True)
            with self._reserve_lock:
                self._reserve_file(check=True)
                slot = self._take_slot()
                try:
                    outstanding = self._others() + len(self._slots)
                    _fallocate_keep_size(fd, size, outstanding * LINE_RESERVE)
                except BaseException:
                    self._drop_slot(slot)
                    raise
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.ENOSYS):
                if exc.filename is None:  # say where: the log the room was for
                    raise OSError(exc.errno, exc.strerror or str(exc), str(self.path)) from None
                raise
            self._no_fallocate = True
            log.warning("the file system of %s cannot reserve space (fallocate): intent lines instead", self.path)
        else:
            return Reservation(slot)
        finally:
            os.close(fd)
        return Reservation(None, intent=self.record(intent))

    def release(self, reservation: Reservation) -> None:
        """End ``reservation`` (its line was written, or its call was refused after all)."""
        if reservation.released:
            return
        reservation.released = True
        if reservation.slot is not None:
            with self._reserve_lock:
                self._drop_slot(reservation.slot)

    def record_reserved(self, event: AuditEvent, reservation: Reservation) -> str:
        """:meth:`record` the line of a call whose room was reserved, then release the reservation."""
        try:
            if reservation.intent is not None:
                return self.record(dataclasses.replace(event, intent=reservation.intent))
            return self.record(event, _reserved=not reservation.released)
        finally:
            self.release(reservation)

    def _reserve_file(self, *, check: bool = False) -> int:
        """``audit.reserve``, open; with ``check`` (once per reservation), opened again when it
        was removed or replaced (the state dir deleted) and this sink holds no reservation in it."""
        path = self._reserve_path
        fd = self._reserve_fd
        if check and fd is not None and not self._slots:
            try:
                same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                self._reserve_fd = fd = None
                if self._reserve_close is not None:
                    self._reserve_close()  # closes the old one (once: a finalizer runs at most once)
        if fd is None:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            self._reserve_fd = fd
            self._reserve_close = weakref.finalize(self, os.close, fd)  # its reservations end with the sink
        return fd

    def _take_slot(self) -> int:
        """Under ``_reserve_lock`` (and the log's lock): lock a byte no reservation holds."""
        fd = self._reserve_file()
        for slot in range(RESERVE_SLOTS):
            if slot in self._slots:
                continue
            try:
                fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _flock(fcntl.F_WRLCK, slot, 1))
            except OSError as exc:
                if exc.errno in (errno.EAGAIN, errno.EACCES):
                    continue  # held by another process (or another sink)
                raise
            self._slots.add(slot)
            return slot
        raise OSError(errno.ENOSPC, f"all {RESERVE_SLOTS} audit reservations are taken")

    def _drop_slot(self, slot: int) -> None:
        if slot in self._slots and self._reserve_fd is not None:
            self._slots.discard(slot)
            fcntl.fcntl(self._reserve_fd, fcntl.F_OFD_SETLK, _flock(fcntl.F_UNLCK, slot, 1))

    def _others(self) -> int:
        """Reservations held by other processes (or sinks): the locked bytes of ``audit.reserve``
        not ours, found range by range (adjacent bytes of one holder merge into one lock)."""
        fd = self._reserve_file()
        count, start = 0, 0
        while start < RESERVE_SLOTS:
            answer = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, _flock(fcntl.F_WRLCK, start, RESERVE_SLOTS - start))
            kind, _, lock_start, length, _ = struct.unpack(_FLOCK, answer[: struct.calcsize(_FLOCK)])
            if kind == fcntl.F_UNLCK:
                break
            end = RESERVE_SLOTS if length == 0 else min(RESERVE_SLOTS, lock_start + length)
            count += end - max(start, lock_start)
            start = end
        return count

    def _outstanding(self) -> int:
        """Every reservation outstanding now (all processes). 0 without fallocate."""
        if self._no_fallocate:
            return 0
        with self._reserve_lock:
            if self._reserve_fd is None and not os.path.exists(self._reserve_path):
                return 0
            return self._others() + len(self._slots)

    def record(self, event: AuditEvent, _reserved: bool = False) -> str:
        pending = _Pending(uuid.uuid4().hex, bounded_fields(event.fields()), reserved=_reserved)
        with self._turn:
            self._queue.append(pending)
            while self._committing and not pending.done:
                self._turn.wait()
            if not pending.done:  # our turn: commit everything queued so far, ours included
                self._committing = True
                batch, self._queue = self._queue, []
        leading = not pending.done
        if leading:
            try:
                self._commit(batch)
            finally:
                with self._turn:
                    self._committing = False
                    self._turn.notify_all()
        error = pending.error
        if error is None:
            return pending.audit_id
        if leading:
            raise error
        # the committer's exception object stays its own; each waiter gets a fresh one
        if isinstance(error, OSError):
            raise OSError(error.errno, error.strerror, error.filename) if error.errno else OSError(str(error))
        raise RuntimeError(f"the audit write failed: {error!r}")

    def _commit(self, batch: list[_Pending]) -> None:
        """Append ``batch`` as consecutive lines under the log's lock, sync once, then record the
        head (only ever a head whose lines are on disk). Every member ends done or with the error.
        A member without a reservation that would take room reserved for a running tool fails
        alone (:meth:`_keep_reserves`); the reserved members are written all the same."""
        written = False
        try:
            fd, size = self._open_locked()
            try:
                start, start_prev, sep, recorded = self._link(fd, size)
                members = batch
                joined, seq, prev = self._lines(members, start, start_prev, sep)
                refused = self._keep_reserves(fd, size, len(joined), members)
                if refused is not None:
                    members = [p for p in batch if p.reserved]
                    for pending in batch:
                        if not pending.reserved:
                            pending.error = refused
                    if not members:
                        raise refused
                    joined, seq, prev = self._lines(members, start, start_prev, sep)
                try:
                    _write_all(fd, joined)
                except BaseException as exc:
                    # a short write (ENOSPC, EIO, a signal) leaves no torn line: back to the last
                    # complete one, still under the lock, so the chain verifies once space is back
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, size)
                    if isinstance(exc, OSError) and exc.errno and exc.filename is None:  # say where
                        raise OSError(exc.errno, exc.strerror or str(exc), str(self.path)) from None
                    raise
                head = ChainHead(seq, prev, size + len(joined))
                if self.sync_interval_s is not None and not self._closed:
                    # synced, and the head recorded, by the flusher within the interval
                    with self._turn:
                        self._known = _Known(head, _file_id(self.head_path) or (0, 0, 0))
                        self._dirty(os.fstat(fd).st_ino)
                else:
                    if self.durable or self.sync_interval_s is not None:
                        os.fdatasync(fd)  # appended data and the new size reach the disk
                    # Both slots when the head does not simply advance (none yet, or a chain restarted
                    # after damage), so an older slot with a higher seq cannot outrank it.
                    save_chain_head(self.head_path, head, both=recorded is None or head.seq <= recorded)
                    self._known = _Known(head, _file_id(self.head_path) or (0, 0, 0))
            finally:
                os.close(fd)  # also releases the flock
            written = True
        except Exception as exc:  # every member gets the failure (OSError: the log cannot be written)
            for pending in batch:
                if pending.error is None:
                    pending.error = exc
        finally:  # never leave a waiter waiting, even when interrupted
            for pending in batch:
                if not written and pending.error is None:
                    pending.error = OSError("the audit write was interrupted")
                pending.done = True

    def _lines(self, batch: list[_Pending], seq: int, prev: str, sep: bytes) -> tuple[bytes, int, str]:
        """The canonical lines of ``batch`` chained from (``seq``, ``prev``) after ``sep``: (the
        bytes, the last seq, the last hash)."""
        data = [sep]
        for pending in batch:
            seq += 1
            line: dict[str, Any] = {
                "v": RECORD_VERSION,
                "seq": seq,
                "id": pending.audit_id,
                "time": datetime.now(UTC).isoformat(timespec="microseconds"),
                **pending.fields,
                **self._mode,
                "prev": prev,
            }
            prev = hashlib.sha256(canonical(line)).hexdigest()
            line["hash"] = prev
            data.append(canonical(line) + b"\n")
        return b"".join(data), seq, prev

    def _keep_reserves(self, fd: int, size: int, length: int, batch: list[_Pending]) -> OSError | None:
        """Under the log's lock, before ``length`` bytes of ``batch`` are appended at ``size``:
        a batch holding a line without a reservation (a refusal: no tool ran) must leave the
        reservations not in ``batch`` covered, so that much is allocated past the end first. The
        error when it cannot (those lines must not take room another call's tool was promised);
        None when it can, or when every line of the batch was reserved (its room is allocated)."""
        if self._no_fallocate or all(p.reserved for p in batch):
            return None
        try:
            others = self._outstanding() - sum(1 for p in batch if p.reserved)
            _fallocate_keep_size(fd, size, length + max(0, others) * LINE_RESERVE)
        except OSError as exc:
            if exc.errno in (errno.EOPNOTSUPP, errno.ENOSYS):
                return None
            return OSError(exc.errno, exc.strerror or str(exc), str(self.path))
        return None

    def _open_locked(self, *, create: bool = True) -> tuple[int, int]:
        """The log, opened for append and locked (reopened if it was replaced while we waited),
        and its size. ``create=False``: FileNotFoundError when there is no log."""
        flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW | (os.O_CREAT if create else 0)
        for _ in range(8):
            try:
                fd = os.open(self.path, flags, 0o600)
            except FileNotFoundError:  # no state directory yet
                if not create:
                    raise
                private_dirs(self.path.parent)
                fd = os.open(self.path, flags, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            st = os.fstat(fd)
            try:
                same = os.stat(self.path, follow_symlinks=False).st_ino == st.st_ino
            except FileNotFoundError:
                same = False
            if same:
                return fd, st.st_size
            os.close(fd)
        raise OSError(f"the audit log {self.path} keeps being replaced")

    def _link(self, fd: int, size: int) -> tuple[int, str, bytes, int | None]:
        """(seq, hash) to chain the next line to, a separator to write first (a newline after a
        torn last line, so the damage stays on its own line), and the seq of the recorded head
        (None when there is no valid one)."""
        known = self._known
        if known is not None and known.head.size == size and _file_id(self.head_path) == known.head_id:
            return known.head.seq, known.head.hash, b"", known.head.seq
        try:
            head = load_chain_head(self.head_path)
        except StateError:
            head = None  # a damaged head: verify reports it; the log itself says where the chain is
        if head is not None and head.size == size:
            return head.seq, head.hash, b"", head.seq
        if head is not None and head.size > size:
            # Lines are missing at the end: keep counting from the head so the gap stays visible.
            return head.seq, head.hash, _separator(fd, size), head.seq
        # No head (an older version's log: migrate), or lines appended after it (a crash between an
        # append and its head update, or an older writer): chain to the log's own last line.
        if head is None and size == 0:
            # A new log: record the genesis head first, so a crash right after the first line
            # leaves a head that is merely behind (a warning), never a log without one.
            save_chain_head(self.head_path, ChainHead(0, GENESIS, 0), both=True)
            return 0, GENESIS, b"", 0
        floor = head.size if head is not None else 0
        found = _last_link(fd, size, floor)
        recorded = None if head is None else head.seq
        if found is None:
            seq, prev = (head.seq, head.hash) if head is not None else (0, GENESIS)
            return seq, prev, _separator(fd, size), recorded
        return found[0], found[1], _separator(fd, size), recorded


_INTERVAL_SINKS: weakref.WeakSet[JsonlAudit] = weakref.WeakSet()


@atexit.register
def _flush_at_exit() -> None:
    """Interval-mode sinks sync what they wrote before the process ends."""
    for sink in list(_INTERVAL_SINKS):
        try:
            sink.close()
        except Exception as exc:
            log.error("could not sync the audit log %s at exit: %s", sink.path, exc)


_FLOCK = "@hhqqi"  # struct flock: l_type, l_whence, l_start, l_len, l_pid
_FALLOC_FL_KEEP_SIZE = 1


def _flock(kind: int, start: int, length: int) -> bytes:
    data = struct.pack(_FLOCK, kind, os.SEEK_SET, start, length, 0)
    return data + b"\0" * (32 - len(data)) if len(data) < 32 else data


def _fallocate_keep_size(fd: int, offset: int, length: int) -> None:
    """Allocate ``length`` bytes of ``fd`` from ``offset`` without changing its size (Linux
    ``fallocate(FALLOC_FL_KEEP_SIZE)``; Python has no binding for the flag). Raises OSError
    (ENOSPC: no room; EOPNOTSUPP: the file system has no fallocate)."""
    if length <= 0:
        return
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY and offset + length > limit:
        # fallocate keeping the size ignores the file-size limit, the append later would not
        raise OSError(errno.EFBIG, f"{os.strerror(errno.EFBIG)} (the file-size limit RLIMIT_FSIZE is {limit} bytes)")
    if _libc().fallocate(fd, _FALLOC_FL_KEEP_SIZE, offset, length) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


@functools.cache
def _libc() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    libc.fallocate.restype = ctypes.c_int
    return libc


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _file_id(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _separator(fd: int, size: int) -> bytes:
    return b"\n" if size and os.pread(fd, 1, size - 1) != b"\n" else b""


def _last_link(fd: int, size: int, floor: int) -> tuple[int, str] | None:
    """(seq, hash) of the last complete line of the log at or after byte ``floor``, read backwards
    in growing chunks (any line length up to 16 MiB); a torn fragment after it is skipped. None when
    there is no complete line there."""
    chunk = 1 << 16
    while True:
        start = max(floor, size - chunk)
        data = os.pread(fd, size - start, start)
        end = data.rfind(b"\n")  # the newline ending the last complete line
        cut = data.rfind(b"\n", 0, end) if end >= 0 else -1  # the one before it
        if cut >= 0 or start == floor or size - start > _MAX_LAST_LINE:
            break
        chunk *= 4
    if end < 0:
        return None
    last = data[cut + 1 : end]
    try:
        record = json.loads(last)
        seq, digest = record["seq"], record["hash"]
        if type(seq) is int and isinstance(digest, str):
            return seq, digest
    except (ValueError, KeyError, TypeError, RecursionError):
        pass
    # A damaged last line: chain to its raw bytes, so verify reports the damage where it is.
    return 0, hashlib.sha256(last).hexdigest()


# ---------------------------------------------------------------------------------------------
# Verification


@dataclass(frozen=True, slots=True)
class Problem:
    """One finding of :func:`verify`. ``code`` is stable (:class:`tooldir.codes.AuditCode`).
    ``line`` is 1-based (None: not about one line)."""

    code: AuditCode
    message: str
    line: int | None = None
    severity: str = "error"

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "code": self.code, "severity": self.severity, "message": self.message}


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """``ok`` when no problem is an error. ``lines`` lines form an intact chain ending at
    ``head_seq``/``head``; ``broken_line``/``reason_code``/``reason`` describe the first error."""

    ok: bool
    lines: int
    head: str
    head_seq: int = 0
    recorded_head: ChainHead | None = None
    problems: tuple[Problem, ...] = field(default=())

    @property
    def first_error(self) -> Problem | None:
        return next((p for p in self.problems if p.severity == "error"), None)

    @property
    def broken_line(self) -> int | None:
        first = self.first_error
        return None if first is None else first.line

    @property
    def reason_code(self) -> str | None:
        first = self.first_error
        return None if first is None else first.code

    @property
    def reason(self) -> str | None:
        first = self.first_error
        return None if first is None else first.message

    def to_json(self) -> dict[str, Any]:
        recorded = self.recorded_head
        return {
            "ok": self.ok,
            "lines": self.lines,
            "head": {"seq": self.head_seq, "hash": self.head},
            "recorded_head": None if recorded is None else {"seq": recorded.seq, "hash": recorded.hash},
            "broken_line": self.broken_line,
            "reason_code": self.reason_code,
            "reason": self.reason,
            "problems": [p.to_json() for p in self.problems],
        }


def parse_head(text: str) -> tuple[int | None, str]:
    """``SEQ:HASH`` or ``HASH`` (64 lowercase hex digits) -> (seq or None, hash).

    Raises:
        ValueError: anything else.
    """
    match = _HEAD_TEXT.match(text.strip().lower())
    if match is None:
        raise ValueError("expected SEQ:HASH or HASH, e.g. 12:3f9a... (64 hex digits), as 'tooldir audit head' prints")
    return (int(match.group(1)) if match.group(1) else None), match.group(2)


def verify(
    path: Path,
    *,
    head_path: Path | None = None,
    expect_head: tuple[int | None, str] | None = None,
    require_head: bool = True,
) -> VerifyReport:
    """Check the whole chain, byte for byte, then compare its end with the recorded head (and with
    ``expect_head``, a copy kept elsewhere, from :func:`parse_head`). A missing log with no head is
    an empty, valid log. A log with lines but no head is an error (``head-missing``), a warning
    with ``require_head=False`` (a log of an older version before its first new append).

    Raises:
        OSError: the log exists but cannot be read.
    """
    path = Path(path)
    problems: list[Problem] = []
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        fh = None
    with contextlib.ExitStack() as stack:
        limit = 0
        if fh is not None:
            stack.enter_context(fh)
            # The head and the log's size as one snapshot: appends hold the lock exclusively while
            # they write both, so lines appended while we read are simply not part of this check.
            fcntl.flock(fh.fileno(), fcntl.LOCK_SH)
            try:
                recorded, head_problem = _recorded_head(path, head_path)
                limit = os.fstat(fh.fileno()).st_size
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        else:
            recorded, head_problem = _recorded_head(path, head_path)
        if head_problem is not None:
            problems.append(head_problem)
        want_seq, want_hash = expect_head if expect_head is not None else (None, None)
        seen_expected = False
        marks: dict[int, str] = {}  # seq -> hash of the lines the heads point at
        points = {s for s in (want_seq, recorded.seq if recorded else None) if s}
        prev, count, broken = GENESIS, 0, False
        last_raw = b""
        if fh is None:
            if recorded is not None and recorded.seq > 0:
                problems.append(
                    Problem(
                        AuditCode.LOG_MISSING,
                        f"the audit log is missing: {recorded.seq} lines missing at the end "
                        f"(the recorded head is {recorded.text})",
                        1,
                    )
                )
                broken = True
        else:
            number = 0
            while limit > 0:
                raw = fh.readline(min(limit, _MAX_LAST_LINE + 1))
                if not raw:
                    break
                limit -= len(raw)
                number += 1
                if len(raw) > _MAX_LAST_LINE:
                    problem: Problem | None = Problem(
                        AuditCode.TOO_LONG, f"the line is longer than {_MAX_LAST_LINE} bytes", number
                    )
                else:
                    problem, digest = _check_line(raw, number, prev)
                if problem is not None:
                    problems.append(problem)
                    broken = True
                    break
                prev, count, last_raw = digest, number, raw
                if number in points:
                    marks[number] = digest
                if digest == want_hash:
                    seen_expected = True
    if not broken:
        problems.extend(_head_problems(count, prev, recorded, marks, require_head, kept_as=_kept_as(last_raw)))
        if expect_head is not None:
            problems.extend(_expected_problems(count, marks, want_seq, str(want_hash), seen_expected))
    ok = not any(p.severity == "error" for p in problems)
    return VerifyReport(ok, count, prev, count, recorded, tuple(problems))


def _recorded_head(path: Path, head_path: Path | None) -> tuple[ChainHead | None, Problem | None]:
    try:
        return load_chain_head(head_path if head_path is not None else audit_head_path(path)), None
    except StateError as exc:
        return None, Problem(AuditCode.HEAD_INVALID, f"the chain head {exc.path} is damaged: {exc.message}")


def _kept_as(raw: bytes) -> str:
    """How the line ``raw`` (a verified line, or empty) says it was kept: "" when synced before its
    call returned, else a phrase naming its (weakened) ``durability``."""
    if not raw:
        return ""
    line = json.loads(raw)
    mode = line.get("durability")
    if mode == "interval":
        return f"audit.durability = 'interval', synced within {line.get('sync_interval_ms')} ms of its call"
    if mode == "buffered":
        return "audit.durability = 'buffered', never synced by tooldir"
    return ""


def _head_problems(
    count: int,
    last: str,
    recorded: ChainHead | None,
    marks: Mapping[int, str],
    require_head: bool,
    *,
    kept_as: str = "",
) -> list[Problem]:
    if recorded is None:
        if count == 0:
            return []
        return [
            Problem(
                AuditCode.HEAD_MISSING,
                "no chain head is recorded beside the log, so lines missing at the end cannot be detected "
                "(a log written before heads existed gets one at its next append)",
                None,
                "error" if require_head else "warning",
            )
        ]
    if recorded.seq > count:
        missing = recorded.seq - count
        return [
            Problem(
                AuditCode.MISSING_LINES,
                f"{missing} line{'s' if missing != 1 else ''} missing at the end: the log ends at line {count} "
                f"but the recorded head is {recorded.text}",
                count + 1,
            )
        ]
    at = last if recorded.seq == count else marks.get(recorded.seq)
    if recorded.seq > 0 and at != recorded.hash:
        return [
            Problem(
                AuditCode.HEAD_MISMATCH,
                f"line {recorded.seq} has hash {at} but the recorded head is {recorded.text} (the log was rewritten)",
                recorded.seq,
            )
        ]
    if recorded.seq < count:
        extra = count - recorded.seq
        lines = f"{extra} line{'s' if extra != 1 else ''} after the recorded head {recorded.text}"
        if kept_as:
            why = (
                f"{lines}, not yet synced when the head was recorded: the newest line was written under "
                f"{kept_as}; a writer still running syncs them and moves the head, and after a power cut or "
                "OS crash the lines written after the last sync can be missing without a trace"
            )
        else:
            why = f"{lines} (an append interrupted before its head update, or a head restored from an older copy)"
        return [Problem(AuditCode.HEAD_BEHIND, why, recorded.seq + 1, "warning")]
    return []


def _expected_problems(count: int, marks: Mapping[int, str], seq: int | None, digest: str, seen: bool) -> list[Problem]:
    if seq is None:
        if seen or (count == 0 and digest == GENESIS):
            return []
        return [Problem(AuditCode.EXPECTED_HEAD_NOT_FOUND, f"no line of the log has the expected head hash {digest}")]
    if seq > count:
        missing = seq - count
        return [
            Problem(
                AuditCode.MISSING_LINES,
                f"{missing} line{'s' if missing != 1 else ''} missing at the end: the log ends at line {count} "
                f"but the expected head is {seq}:{digest}",
                count + 1,
            )
        ]
    at = marks.get(seq, GENESIS if seq == 0 else None)
    if at != digest:
        return [
            Problem(
                AuditCode.HEAD_MISMATCH,
                f"line {seq} has hash {at} but the expected head is {seq}:{digest} (the log was rewritten)",
                seq or None,
            )
        ]
    return []


def _check_line(raw: bytes, number: int, prev: str) -> tuple[Problem | None, str]:
    def bad(code: AuditCode, message: str) -> tuple[Problem, str]:
        return Problem(code, message, number), prev

    if not raw.endswith(b"\n"):
        return bad(AuditCode.NOT_TERMINATED, "the line is not terminated (torn write or truncation)")
    body = raw[:-1]
    try:
        line = loads(body)
    except StrictJSONError as exc:
        code = AuditCode.DUPLICATE_KEY if exc.code == "duplicate-key" else AuditCode.INVALID_JSON
        return bad(code, f"not valid strict JSON ({exc.code}): {exc.message}")
    if not isinstance(line, Mapping) or not isinstance(line.get("hash"), str):
        return bad(AuditCode.NOT_A_RECORD, "not an audit record (no hash)")
    serialise = _SERIALISERS.get(line.get("v")) if type(line.get("v")) is int else None
    if serialise is None:
        return bad(AuditCode.UNKNOWN_VERSION, f"unknown record version {line.get('v')!r}")
    try:
        digest = hashlib.sha256(serialise({k: v for k, v in line.items() if k != "hash"})).hexdigest()
        exact = serialise(line) == body
    except (ValueError, TypeError) as exc:
        return bad(AuditCode.NOT_CANONICAL, f"the content cannot be serialised canonically ({exc})")
    if digest != line["hash"]:
        return bad(AuditCode.HASH_MISMATCH, "the line was edited: its content does not match its hash")
    if not exact:
        return bad(
            AuditCode.NOT_CANONICAL,
            "the line's bytes differ from the canonical form of its content (whitespace, key order "
            "or escapes were changed)",
        )
    if line.get("seq") != number:
        return bad(
            AuditCode.SEQ_MISMATCH,
            f"sequence number {line.get('seq')!r} where {number} was expected (a line was deleted or moved)",
        )
    if line.get("prev") != prev:
        return bad(
            AuditCode.PREV_MISMATCH,
            "the previous-line hash does not match (a line before it was deleted, moved or replaced)",
        )
    return None, digest
