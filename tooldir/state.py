"""User state: approvals and signature high-water marks, under ``$XDG_STATE_HOME/tooldir``.

The location comes only from the CLI (``--state-dir``), the environment of the user's own shell
(``TOOLDIR_STATE_DIR``, ``XDG_STATE_HOME``) or the default; never from a project. Files are JSON,
written atomically (:func:`tooldir._internal.atomic.write_atomic`: temp file, fsync, ``os.replace``)
with mode 0600, so a crash leaves the old or the new content, never a torn file. A state file or
folder another user could have changed is refused (:func:`check_trusted`), never obeyed.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._internal.atomic import private_dirs, write_atomic
from ._internal.ownership import path_problem, refusal
from ._internal.smallfile import Unreadable, read_private
from .errors import StateDirError, StateError
from .model import ToolRecord

APPROVALS = "approvals.json"
HIGH_WATER = "versions.json"
UPSTREAM_STATE = "upstream.json"  # the MCP server packages' last listings and pins (tooldir.upstream)
VERIFIED = "verified.bin"
_LOCK = ".lock"


def default_state_dir() -> Path:
    """``$TOOLDIR_STATE_DIR``, else ``$XDG_STATE_HOME/tooldir`` (``~/.local/state`` when it is unset or
    relative, as XDG says). Raises StateDirError for a relative ``TOOLDIR_STATE_DIR``."""
    explicit = os.environ.get("TOOLDIR_STATE_DIR")
    if explicit:
        return absolute_state_dir(explicit, setting="TOOLDIR_STATE_DIR")
    base = os.environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(base):  # XDG: a relative value is invalid (it would name the project) and ignored
        base = str(Path.home() / ".local" / "state")
    return Path(base) / "tooldir"


def absolute_state_dir(value: str | os.PathLike[str], *, setting: str) -> Path:
    """A state location the user gave (``--state-dir``, ``TOOLDIR_STATE_DIR``), which must be
    absolute (``~`` is expanded): a relative one resolves against the current directory, usually
    the untrusted project, which could then supply its own approvals.

    Raises:
        StateDirError: ``value`` is relative.
    """
    text = os.fspath(value)
    path = Path(text).expanduser()
    if not path.is_absolute():
        raise StateDirError(
            f"{setting} {text!r} is a relative path: it would resolve inside the current directory (often the "
            "project, which must never supply your approvals); give an absolute path",
            setting=setting,
            value=text,
        )
    return path


@dataclass(frozen=True, slots=True)
class Approval:
    path: str
    name: str
    digest: str
    time: str
    key: str | None = None
    files: tuple[tuple[str, str], ...] = ()  # (relative path, sha256) as approved, to explain changes

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "digest": self.digest, "time": self.time, "key": self.key, "files": dict(self.files)}


def check_trusted(path: Path, what: str = "state file") -> None:
    """Refuse a state file (or the state folder) another user could have changed: it, the state
    folder and the folders on the way to it follow the ownership rule of discovery
    (:func:`tooldir._internal.ownership.path_problem`). A state folder another user made (a 0777
    one in a shared temporary folder) must never supply approvals, pins or marks.

    Raises:
        StateError: naming the file and why.
    """
    problem = path_problem(path)
    if problem is not None:
        raise StateError(refusal(path, problem, what), path=str(path))


#: The largest state JSON file read (approvals of thousands of tools fit many times over).
MAX_STATE_BYTES = 64 * 1024 * 1024


def read_private_state(path: Path, max_bytes: int) -> bytes | None:
    """The bytes of the state file at ``path`` (None: none is there), judged as
    :func:`check_trusted` judges it, through the descriptor read; the folders on the way are walked
    once per state folder while it stays the same, not on every read.

    Raises:
        StateError: naming the file and why.
    """
    try:
        return read_private(path, max_bytes, what="a state file", owner="user-or-root", folder="trusted")
    except Unreadable as exc:
        if exc.problem is not None:
            raise StateError(refusal(path, exc.problem, "state file"), path=str(path)) from None
        raise StateError(f"cannot read: {exc.why}" if exc.os_error else exc.why, path=str(path)) from None


def read_json(path: Path, default: dict[str, Any]) -> dict[str, Any]:
    data = read_private_state(path, MAX_STATE_BYTES)
    if data is None:
        return default
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise StateError(f"not valid JSON ({exc}); restore it or delete it to start over", path=str(path)) from None
    if not isinstance(value, dict):
        raise StateError("expected a JSON object", path=str(path))
    return value


def write_json_atomic(path: Path, value: Any) -> None:
    private_dirs(path.parent)
    write_atomic(path, (json.dumps(value, indent=2, sort_keys=True) + "\n").encode("utf-8"), sync_dir=True)


def load_approvals(state_dir: Path) -> dict[str, Approval]:
    path = state_dir / APPROVALS
    raw = read_json(path, {"version": 1, "approvals": {}})
    entries = raw.get("approvals", {})
    if not isinstance(entries, dict):
        raise StateError("'approvals' must be an object", path=str(path))
    result: dict[str, Approval] = {}
    for pkg_path, entry in entries.items():
        try:
            files = entry.get("files") or {}
            result[pkg_path] = Approval(
                path=pkg_path,
                name=str(entry["name"]),
                digest=str(entry["digest"]),
                time=str(entry["time"]),
                key=entry.get("key"),
                files=tuple(sorted((str(k), str(v)) for k, v in files.items())),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise StateError(f"approval for {pkg_path!r} is malformed ({exc})", path=str(path)) from None
    return result


def save_approvals(state_dir: Path, approvals: dict[str, Approval]) -> None:
    write_json_atomic(
        state_dir / APPROVALS,
        {"version": 1, "approvals": {p: a.to_json() for p, a in sorted(approvals.items())}},
    )


@contextmanager
def locked(state_dir: Path) -> Iterator[None]:
    """Serialise read-modify-write updates of state files between processes (``flock``)."""
    private_dirs(state_dir)
    check_trusted(state_dir, "state folder")
    fd = os.open(state_dir / _LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def record_approval(state_dir: Path, approval: Approval) -> None:
    """Add or replace the approval of ``approval.path`` (atomic, 0600)."""
    with locked(state_dir):
        approvals = load_approvals(state_dir)
        approvals[approval.path] = approval
        save_approvals(state_dir, approvals)


def remove_approvals(state_dir: Path, paths: Iterable[str]) -> list[Approval]:
    """Remove the approvals of ``paths``; returns the ones that existed."""
    with locked(state_dir):
        approvals = load_approvals(state_dir)
        removed = [approvals.pop(p) for p in sorted(set(paths)) if p in approvals]
        if removed:
            save_approvals(state_dir, approvals)
    return removed


# ---------------------------------------------------------------------------------------------
# High-water marks: the highest lock version seen per (signer key, tool) -- rollback protection.
# Every load records the versions it verified for use (``Loader``, unless ``read_only``); the
# writes go through ``record_versions``.

HighWater = dict[tuple[str, str], int]


def load_high_water(state_dir: Path) -> HighWater:
    path = state_dir / HIGH_WATER
    raw = read_json(path, {"version": 1, "marks": {}})
    marks = raw.get("marks", {})
    if not isinstance(marks, dict):
        raise StateError("'marks' must be an object", path=str(path))
    result: HighWater = {}
    for signer, tools in marks.items():
        if not isinstance(tools, dict):
            raise StateError(f"marks for signer {signer!r} must be an object", path=str(path))
        for tool, version in tools.items():
            if type(version) is not int or version < 0:
                raise StateError(f"mark for {signer!r}/{tool!r} must be a non-negative integer", path=str(path))
            result[(str(signer), str(tool))] = version
    return result


def record_versions(state_dir: Path, seen: Iterable[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    """Raise the high-water marks to the (signer, tool, version) triples seen; never lowers one.
    Returns the marks that changed. Writes nothing when nothing changed."""
    wanted = list(seen)
    if not wanted:
        return []
    with locked(state_dir):
        marks = load_high_water(state_dir)
        changed = []
        for signer, tool, version in wanted:
            if marks.get((signer, tool), -1) < version:
                marks[(signer, tool)] = version
                changed.append((signer, tool, version))
        if changed:
            nested: dict[str, dict[str, int]] = {}
            for (signer, tool), version in sorted(marks.items()):
                nested.setdefault(signer, {})[tool] = version
            write_json_atomic(state_dir / HIGH_WATER, {"version": 1, "marks": nested})
    return changed


def record_seen_versions(state_dir: Path, records: Iterable[ToolRecord]) -> list[tuple[str, str, int]]:
    """Raise the high-water marks for every tool in ``records`` that is trusted by a signature
    (every load does this itself, see :class:`tooldir.snapshot.loader.Loader`)."""
    seen: list[tuple[str, str, int]] = []
    for r in records:
        t = r.trust
        if t.trusted and t.version is not None and t.signer and t.method.startswith("signed:"):
            seen.extend((signer, r.name, t.version) for signer in dict.fromkeys((t.signer, *t.signers)))
    return record_versions(state_dir, seen)


# ---------------------------------------------------------------------------------------------
# Verified signatures: sha256 digests of (key, signature, lock) triples that verified, so a new
# process need not redo ~0.2 ms of Ed25519 work per signature. A digest only says "this exact key
# signed this exact lock", a fact anyone can re-check; whoever can write this file can also write
# approvals, so it grants nothing new. Written by every load, like the high-water marks.

_VERIFIED_MAGIC = b"tooldir-verified-v1\n"
_DIGEST = 32
MAX_VERIFIED = 1 << 18


def load_verified(state_dir: Path) -> frozenset[bytes]:
    """The recorded digests; an unreadable or malformed file counts as empty (it is only a cache),
    but one another user could have written is refused (StateError): it says which signatures
    verified."""
    path = state_dir / VERIFIED
    try:
        data = read_private(path, len(_VERIFIED_MAGIC) + MAX_VERIFIED * _DIGEST, owner="user-or-root", folder="trusted")
    except Unreadable as exc:
        if exc.problem is not None:  # another user could have written it
            raise StateError(refusal(path, exc.problem, "state file"), path=str(path)) from None
        return frozenset()
    if data is None:
        return frozenset()
    body = data[len(_VERIFIED_MAGIC) :]
    if not data.startswith(_VERIFIED_MAGIC) or len(body) % _DIGEST or len(body) > MAX_VERIFIED * _DIGEST:
        return frozenset()
    return frozenset(body[i : i + _DIGEST] for i in range(0, len(body), _DIGEST))


def record_verified(state_dir: Path, digests: Iterable[bytes]) -> int:
    """Add digests of successful verifications (newest kept when over the bound). Returns how many
    were new; writes nothing when none were."""
    wanted = [d for d in digests if len(d) == _DIGEST]
    if not wanted:
        return 0
    with locked(state_dir):
        path = state_dir / VERIFIED
        try:
            with open(path, "rb") as fh:
                old = fh.read()
        except FileNotFoundError:
            old = _VERIFIED_MAGIC
        if not old.startswith(_VERIFIED_MAGIC) or (len(old) - len(_VERIFIED_MAGIC)) % _DIGEST:
            old = _VERIFIED_MAGIC
        body = old[len(_VERIFIED_MAGIC) :]
        seen = {body[i : i + _DIGEST] for i in range(0, len(body), _DIGEST)}
        new = [d for d in dict.fromkeys(wanted) if d not in seen]
        if not new:
            return 0
        merged = (body + b"".join(new))[-MAX_VERIFIED * _DIGEST :]
        write_atomic(path, _VERIFIED_MAGIC + merged)
    return len(new)


# ---------------------------------------------------------------------------------------------
# The audit chain head: the (seq, hash) of the newest audit line and the log's size after it,
# beside the log (``audit.jsonl`` -> ``audit.head``). The appender writes it under the log's lock
# after every line is on disk; it takes the next seq and prev hash from here, so a long line can
# never break the chain, and ``audit verify`` compares the log with it to detect lines missing at
# the end.
#
# The file holds two fixed 256-byte slots, each one JSON line (space-padded) with a checksum; a
# head is written in place into slot ``seq % 2``, so the other slot always keeps the previous head
# and a reader takes the valid slot with the highest seq: a torn or interrupted write leaves the
# previous head, never a broken one (the atomicity of a temp file and rename at a fraction of its
# cost: no new inode, no rename, no journal commit per call). It is not fsynced: the log line is
# already on disk (fdatasync) before the head write starts, so a crash can leave the head behind
# the log (``head-behind``, a warning, repaired by the next append) but never ahead of it.

AUDIT_HEAD = "audit.head"
HEAD_SLOT = 256
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True, slots=True)
class ChainHead:
    """The newest line of a hash-chained log: its ``seq`` and ``hash``, and the log's ``size`` in
    bytes right after it (0 when unknown)."""

    seq: int
    hash: str
    size: int = 0

    @property
    def text(self) -> str:
        """``SEQ:HASH``, the form ``tooldir audit head`` prints and ``--expect-head`` takes."""
        return f"{self.seq}:{self.hash}"

    @property
    def check(self) -> str:
        """The slot checksum: the first 16 hex digits of sha256 over ``SEQ:HASH:SIZE``."""
        return hashlib.sha256(f"{self.seq}:{self.hash}:{self.size}".encode("ascii")).hexdigest()[:16]


def audit_head_path(log_path: Path) -> Path:
    """Where the head of the log at ``log_path`` is kept (``audit.jsonl`` -> ``audit.head``)."""
    log_path = Path(log_path)
    stem = log_path.name[: -len(".jsonl")] if log_path.name.endswith(".jsonl") else log_path.name
    return log_path.with_name(f"{stem}.head")


def load_chain_head(path: Path) -> ChainHead | None:
    """The recorded head (the valid slot with the highest seq), or None when nothing is recorded
    (no file, or only empty slots).

    Raises:
        StateError: the file cannot be read, or it holds data but no valid head.
    """
    try:
        with open(path, "rb") as fh:
            data = fh.read(2 * HEAD_SLOT + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateError(f"cannot read: {exc.strerror}", path=str(path)) from None
    if len(data) > 2 * HEAD_SLOT:
        raise StateError(f"not a head file: longer than {2 * HEAD_SLOT} bytes", path=str(path))
    slots = [data[i : i + HEAD_SLOT] for i in range(0, len(data), HEAD_SLOT)]
    heads = [h for h in map(_parse_slot, slots) if h is not None]
    if heads:
        return max(heads, key=lambda h: h.seq)
    if data.strip(b"\0"):
        raise StateError("not a head file: no valid head record in it", path=str(path))
    return None


def _parse_slot(slot: bytes) -> ChainHead | None:
    from ._internal.strictjson import StrictJSONError, loads

    body = slot.rstrip(b" \n\0")
    if not body:
        return None
    try:
        value = loads(body)
    except StrictJSONError:
        return None
    if not isinstance(value, dict) or set(value) != {"check", "hash", "seq", "size", "v"} or value["v"] != 1:
        return None
    seq, digest, size = value["seq"], value["hash"], value["size"]
    if type(seq) is not int or type(size) is not int or seq < 0 or size < 0 or not _is_sha256_hex(digest):
        return None
    head = ChainHead(seq, digest, size)
    return head if value["check"] == head.check else None


def _is_sha256_hex(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 64 and _HEX.issuperset(value)


def save_chain_head(path: Path, head: ChainHead, *, both: bool = False) -> None:
    """Record ``head`` in slot ``seq % 2``, or in both slots (``both``: a head that does not
    advance the recorded one, which the other slot must not outrank). The file is created 0600,
    never through a symlink. Call it under the log's lock, after the log line is on disk."""
    if type(head.seq) is not int or type(head.size) is not int or head.seq < 0 or not _is_sha256_hex(head.hash):
        raise ValueError(f"not a chain head: {head!r}")
    line = f'{{"check":"{head.check}","hash":"{head.hash}","seq":{head.seq},"size":{head.size},"v":1}}'
    data = line.encode("ascii").ljust(HEAD_SLOT - 1) + b"\n"
    if len(data) != HEAD_SLOT:
        raise ValueError(f"chain head too large for its slot: {head!r}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        if both:
            os.pwrite(fd, data + data, 0)
        else:
            os.pwrite(fd, data, HEAD_SLOT * (head.seq % 2))
    finally:
        os.close(fd)
