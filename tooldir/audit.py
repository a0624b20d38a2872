"""The audit log: one JSON line per call and per denial, hash-chained and fsynced.

Every line carries ``seq`` (1, 2, ...), ``prev`` (the previous line's ``hash``; 64 zeros for the
first) and ``hash`` = sha256 over the canonical JSON of the line without ``hash``. So an edited line
fails its own hash, a deleted or reordered line breaks ``seq`` and ``prev`` where it happens, and
:func:`verify` names the first line that is wrong. Truncating the *tail* leaves a valid shorter
chain: compare :attr:`VerifyReport.head` with a copy kept elsewhere to detect that.

Appends take an exclusive ``flock`` so several processes (a CLI run beside ``tooldir serve``) keep
one chain. The file is created 0600 in the user's state directory.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from ._internal.strictjson import dumps_canonical

AUDIT_FILE = "audit.jsonl"
GENESIS = "0" * 64
_TAIL = 1 << 16


def _canonical(value: Any) -> bytes:
    return dumps_canonical(value).encode()


def input_digest(value: Any) -> str:
    """sha256 of the canonical JSON of a tool input (inputs are never logged, only hashed)."""
    try:
        data = _canonical(value)
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
    error_code: str | None
    duration_ms: float
    snapshot: str | None = None
    session: str | None = None
    tool_sha256: str | None = None
    """sha256 of the requested name when ``tool`` is an escaped or capped form of it (else None,
    and the key is left out of the line)."""

    def fields(self) -> dict[str, Any]:
        extra = {} if self.tool_sha256 is None else {"tool_sha256": self.tool_sha256}
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
            "duration_ms": round(self.duration_ms, 3),
            "snapshot": self.snapshot,
            "session": self.session,
        }


class AuditSink(Protocol):
    def record(self, event: AuditEvent) -> str:
        """Persist one event; return its audit id. Raises OSError if it cannot be stored."""
        ...


class JsonlAudit:
    """The hash-chained JSONL sink at ``<state_dir>/audit.jsonl``."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._cache: tuple[int, int, str] | None = None  # (file size, last seq, last hash)

    @classmethod
    def in_state_dir(cls, state_dir: Path) -> JsonlAudit:
        return cls(Path(state_dir) / AUDIT_FILE)

    def record(self, event: AuditEvent) -> str:
        audit_id = uuid.uuid4().hex
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                size = os.fstat(fd).st_size
                if self._cache is not None and self._cache[0] == size:
                    seq, prev = self._cache[1], self._cache[2]
                else:
                    seq, prev = _last_link(self.path, size)
                line: dict[str, Any] = {
                    "v": 1,
                    "seq": seq + 1,
                    "id": audit_id,
                    "time": datetime.now(UTC).isoformat(timespec="microseconds"),
                    **_encodable(event.fields()),
                    "prev": prev,
                }
                digest = hashlib.sha256(_canonical(line)).hexdigest()
                line["hash"] = digest
                data = _canonical(line) + b"\n"
                os.write(fd, data)
                os.fdatasync(fd)  # appended data and the new size reach the disk
                self._cache = (size + len(data), seq + 1, digest)
            finally:
                os.close(fd)  # also releases the flock
        return audit_id


def _encodable(fields: dict[str, Any]) -> dict[str, Any]:
    """The event's fields with every string UTF-8 can encode: a lone surrogate (a name from
    ``os.fsdecode`` or a client's ``"\\udcff"``) is written as the escape ``\\udcff``, so one
    odd value never costs the audit line."""
    out = dict(fields)
    for key, value in fields.items():
        if isinstance(value, str) and not value.isascii():
            try:
                value.encode()
            except UnicodeEncodeError:
                out[key] = value.encode("utf-8", "backslashreplace").decode()
    return out


def _last_link(path: Path, size: int) -> tuple[int, str]:
    """(seq, hash) of the last line of the log, or (0, GENESIS) for an empty one."""
    if size == 0:
        return 0, GENESIS
    with open(path, "rb") as fh:
        fh.seek(max(0, size - _TAIL))
        tail = fh.read(_TAIL)
    lines = [ln for ln in tail.split(b"\n") if ln.strip()]
    if not lines:
        return 0, GENESIS
    try:
        last = json.loads(lines[-1])
        return int(last["seq"]), str(last["hash"])
    except (ValueError, KeyError, TypeError):
        # A damaged tail: keep appending, chained to the raw bytes, so verify reports the damage.
        return 0, hashlib.sha256(lines[-1]).hexdigest()


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """``ok`` with ``lines`` entries, or the first broken line (1-based) and why."""

    ok: bool
    lines: int
    head: str
    broken_line: int | None = None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "lines": self.lines,
            "head": self.head,
            "broken_line": self.broken_line,
            "reason": self.reason,
        }


def verify(path: Path) -> VerifyReport:
    """Check the whole chain. A missing file is an empty, valid log.

    Raises:
        OSError: the file exists but cannot be read.
    """
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return VerifyReport(True, 0, GENESIS)
    prev = GENESIS
    count = 0
    with fh:
        for number, raw in enumerate(fh, start=1):
            problem, digest = _check_line(raw, number, prev)
            if problem is not None:
                return VerifyReport(False, count, prev, number, problem)
            prev = digest
            count = number
    return VerifyReport(True, count, prev)


def _check_line(raw: bytes, number: int, prev: str) -> tuple[str | None, str]:
    if not raw.endswith(b"\n"):
        return "the line is not terminated (torn write or truncation)", prev
    try:
        line = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return "not valid JSON", prev
    if not isinstance(line, Mapping) or not isinstance(line.get("hash"), str):
        return "not an audit record (no hash)", prev
    body = {k: v for k, v in line.items() if k != "hash"}
    digest = hashlib.sha256(_canonical(body)).hexdigest()
    if digest != line["hash"]:
        return "the line was edited: its content does not match its hash", prev
    if line.get("seq") != number:
        return f"sequence number {line.get('seq')!r} where {number} was expected (a line was deleted or moved)", prev
    if line.get("prev") != prev:
        return "the previous-line hash does not match (a line before it was deleted, moved or replaced)", prev
    return None, digest
