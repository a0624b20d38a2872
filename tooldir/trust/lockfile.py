"""``tool.lock``: the signed statement of what a tool package contains.

A lock is a small JSON document, written by ``tooldir lock`` and signed as raw bytes::

    {
      "format": "tooldir-lock/1",
      "name": "jira_get_issue",
      "version": 3,
      "expires": "2027-01-01T00:00:00Z",
      "files": {"run.py": "sha256:<64 hex>", "schema.json": "sha256:<64 hex>"}
    }

``version`` is a non-negative integer that only ever grows (rollback protection); ``expires`` is
optional (an ISO 8601 time with a zone, or null). ``files`` lists every file of the package except the
lock and its signatures, by '/'-separated relative path. Parsing is strict: unknown keys, duplicate
keys, wrong types and odd paths are errors with a JSON pointer. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, time
from types import MappingProxyType
from typing import Any

from .._internal.strictjson import escape_pointer
from ..model import PackageFile
from ..names import is_valid_name
from ..read.discover import LOCK as LOCK  # noqa: PLC0414 - re-exported (the names live in discover)
from ..read.discover import MINISIG as MINISIG  # noqa: PLC0414
from ..read.discover import SSHSIG as SSHSIG  # noqa: PLC0414
from ..read.discover import UNLISTED as UNLISTED  # noqa: PLC0414

# The file names (the lock, its signatures, and UNLISTED: files never listed in a lock) are
# defined with the rest of the folder layout in tooldir.read.discover, and re-exported here.
FORMAT = "tooldir-lock/1"
MAX_VERSION = 2**53 - 1

_KEYS = frozenset({"format", "name", "version", "expires", "files"})
_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")


class LockError(ValueError):
    """A lock that cannot be parsed; ``pointer`` is a JSON Pointer into it."""

    def __init__(self, message: str, pointer: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.pointer = pointer


@dataclass(frozen=True, slots=True)
class Lock:
    name: str
    version: int
    expires: datetime | None
    files: Mapping[str, str]  # relative path -> "sha256:<hex>"

    def expired(self, now: datetime) -> bool:
        return self.expires is not None and now >= self.expires


@dataclass(frozen=True, slots=True)
class FileMismatch:
    """How a package's files differ from its lock (all tuples sorted)."""

    unlisted: tuple[str, ...]  # present but not in the lock
    missing: tuple[str, ...]  # in the lock but absent
    changed: tuple[str, ...]  # present with a different hash

    @property
    def clean(self) -> bool:
        return not (self.unlisted or self.missing or self.changed)


def parse_expiry(text: str) -> datetime:
    """An ISO 8601 date (midnight UTC) or date-time; a time without a zone is refused.

    Raises:
        ValueError: not a date, or a date-time without a zone.
    """
    try:
        if len(text) == 10:
            return datetime.combine(datetime.strptime(text, "%Y-%m-%d").date(), time(0, 0), tzinfo=UTC)
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 date (2027-01-31) or date-time (2027-01-31T12:00:00Z)") from None
    if value.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone; add 'Z' for UTC or an offset such as +02:00")
    return value.astimezone(UTC)


def format_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _DuplicateKeyError(ValueError):
    pass


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)  # built in C; fewer entries than pairs means a key repeats
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKeyError(key)
            seen.add(key)
    return out


def _constant(name: str) -> None:
    raise ValueError(f"non-finite number {name}")


# A lean strict decoder (the lock is on the signed-load hot path): duplicate keys, NaN/Infinity,
# BOM, NUL and invalid UTF-8 are refused; the structure is then checked field by field.
_decoder = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_constant)


def _decode(data: bytes) -> Any:
    if data.startswith(b"\xef\xbb\xbf") or b"\0" in data:
        raise LockError("invalid-encoding: byte-order mark or NUL byte")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LockError(f"invalid-encoding: invalid UTF-8 at byte {exc.start}") from None
    try:
        value, end = _decoder.raw_decode(text)
    except _DuplicateKeyError as exc:
        raise LockError(f"duplicate-key: {exc.args[0]!r} appears twice") from None
    except json.JSONDecodeError as exc:
        raise LockError(f"invalid-json: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except (ValueError, RecursionError) as exc:
        raise LockError(f"invalid-json: {str(exc)[:120]}") from None
    if text[end:].strip(" \t\r\n"):
        raise LockError("invalid-json: extra data after the JSON document")
    return value


def _check_path(path: str) -> str | None:
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate"
    if not path or path.startswith("/") or "\\" in path or "\0" in path:
        return "must be a relative '/'-separated path"
    if any(part in ("", ".", "..") for part in path.split("/")):
        return "may not contain empty, '.' or '..' components"
    if path in UNLISTED:
        return "the lock and its signatures are never listed"
    return None


def parse_lock(data: bytes) -> Lock:
    """Parse ``tool.lock`` bytes strictly.

    Raises:
        LockError: with a message and a JSON pointer.
    """
    value = _decode(data)
    if not isinstance(value, dict):
        raise LockError("the lock must be a JSON object")
    unknown = sorted(set(value) - _KEYS)
    if unknown:
        raise LockError(f"unknown key {unknown[0]!r}", f"/{unknown[0]}")
    for key in ("format", "name", "version", "files"):
        if key not in value:
            raise LockError(f"missing key {key!r}", f"/{key}")
    if value["format"] != FORMAT:
        raise LockError(f"format must be {FORMAT!r}, not {value['format']!r}", "/format")
    name = value["name"]
    if not isinstance(name, str) or not is_valid_name(name):
        raise LockError("name must be a tool name (A-Z, a-z, 0-9, '_', '-'; 1-64 characters)", "/name")
    version = value["version"]
    if type(version) is not int or not 0 <= version <= MAX_VERSION:
        raise LockError(f"version must be an integer from 0 to {MAX_VERSION}", "/version")
    expires_raw = value.get("expires")
    expires: datetime | None = None
    if expires_raw is not None:
        if not isinstance(expires_raw, str):
            raise LockError("expires must be an ISO 8601 string or null", "/expires")
        try:
            expires = parse_expiry(expires_raw)
        except ValueError as exc:
            raise LockError(str(exc), "/expires") from None
    files = value["files"]
    if not isinstance(files, dict) or not files:
        raise LockError("files must be a non-empty object of path -> 'sha256:<hex>'", "/files")
    for path, digest in files.items():
        problem = _check_path(path)
        if problem:
            raise LockError(f"file {path!r} {problem}", _file_pointer(path))
        if not isinstance(digest, str) or not _HASH.match(digest):
            raise LockError(f"hash of {path!r} must be 'sha256:' and 64 lowercase hex digits", _file_pointer(path))
    return Lock(name, version, expires, MappingProxyType(dict(files)))


def _file_pointer(path: str) -> str:
    return "/files/" + escape_pointer(path)


def render_lock(name: str, version: int, expires: datetime | None, files: Iterable[PackageFile]) -> bytes:
    """The canonical bytes of a lock listing ``files`` (the lock and signatures are left out)."""
    listing = {f.path: f"sha256:{f.sha256}" for f in sorted(files, key=lambda f: f.path) if f.path not in UNLISTED}
    doc = {
        "format": FORMAT,
        "name": name,
        "version": version,
        "expires": None if expires is None else format_time(expires),
        "files": listing,
    }
    data = (json.dumps(doc, indent=2, ensure_ascii=True) + "\n").encode()
    parse_lock(data)  # never write what we would not read back
    return data


_CLEAN = FileMismatch((), (), ())


def compare_files(lock: Lock, files: Iterable[PackageFile]) -> FileMismatch:
    present = {f.path: f"sha256:{f.sha256}" for f in files if f.path not in UNLISTED}
    if present == lock.files:  # the common case, compared in C: same paths, same hashes
        return _CLEAN
    unlisted = sorted(set(present) - set(lock.files))
    missing = sorted(set(lock.files) - set(present))
    changed = sorted(p for p in set(present) & set(lock.files) if present[p] != lock.files[p])
    return FileMismatch(tuple(unlisted), tuple(missing), tuple(changed))
