"""A persistent content index of tool roots, like git's index: unchanged packages are stat'ed, not
read, parsed, validated and hashed again by a new process.

Per root, one file in the user's state (``<state>/index/<id>.idx``, 0600, written atomically) maps
every package folder to

- the ``fstat`` (device, inode, mode, links, owner, group, size, mtime_ns, ctime_ns) of the folder,
  its sub-folders and its files, each taken by discovery on the opened descriptor *before* the
  folder was listed or the file read;
- what discovery and validation made of it: the file list with sha256s, the package digest, the
  bytes of the manifest and lock files, the validation diagnostics, and whether a manifest came out.

The file is keyed (its header) by the index format, tooldir's version, a digest of the code that
shapes a record (discovery, validation, the model, the validators' binaries), the policy's digest,
the source kind and root path, and the user id; an index with another key is ignored and rebuilt.

What the index never does:

- **decide trust.** Trust is assessed again on every load from the reconstructed candidate, so an
  approval, a revocation or a new key counts at once. A root whose source requires trust
  (approval, pin or signature: project tools by default) is never indexed at all: its digest
  decides trust, so its files must be read and hashed on every load, and then validating them
  again costs no more than rebuilding a record from the index (measured: 0.96x at 10k). So no
  index entry, forged or stale, can make a changed trust-gated tool active.
- **decide what runs.** Execution re-reads and re-hashes the package's files against the
  snapshot's record before anything runs (:mod:`tooldir.sandbox.store`).
- **trust itself.** A corrupt, truncated, foreign, wrong-owner, group/world-writable or oversized
  index is ignored (an ``index-ignored`` warning says why) and rebuilt; a malformed entry, or one
  whose kept bytes do not hash to its recorded sha256, is dropped and its package read again.

Racily clean entries (like git): an entry is used only when every recorded mtime and ctime is
older than the start of the load that recorded it by more than :data:`RACY_NS` (the timestamp
granularity, with margin), so a file changed in the same tick as it was read is read again. A
package with a group-writable entry (its verdict depends on /etc/group) is never indexed.

Format: ``MAGIC``, one JSON header line (with the lengths of what follows), a JSON table (plain
lists and numbers) and a blob of the kept file bytes the table points into. JSON rather than
pickle (which runs code when loaded) or marshal (documented as unsafe against crafted input): the
index is state another process may have left, so only plain data is ever decoded from it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import stat
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from itertools import chain
from pathlib import Path
from types import MappingProxyType
from typing import IO, Any

from .._internal.atomic import private_dirs, write_atomic
from .._internal.smallfile import Unreadable, read_private
from .._internal.strictjson import FrozenDict, freeze_arrays_in_place
from ..codes import DiagnosticCode
from ..model import Diagnostic, ExecuteSpec, Manifest, NetworkAllow, PackageFile, Risk, Severity, Source, warning
from ..policy import Limits, Policy
from .discover import MANIFEST, PackageScan, RootSpec, scan_package
from .validate import Candidate, validate_package

log = logging.getLogger("tooldir.index")

FORMAT = "tooldir-index-v1"
MAGIC = b"tooldir-index-v1\n"
INDEX_DIR = "index"
#: Entries whose files changed less than this before the load that recorded them are re-read.
RACY_NS = 2_000_000_000
#: An index file larger than this is ignored (and not rewritten by a load that would exceed it).
MAX_INDEX_BYTES = 1 << 30
#: Set to "1" to bypass the index for every load of this process environment.
ENV_DISABLE = "TOOLDIR_NO_INDEX"

#: (st_dev, st_ino, st_mode, st_nlink, st_uid, st_gid, st_size, st_mtime_ns, st_ctime_ns)
StatKey = tuple[int, int, int, int, int, int, int, int, int]

# modules whose code decides what discovery and validation make of a package
_CODE = (
    "read/discover.py", "read/validate.py", "model.py", "names.py", "text.py", "policy.py", "read/index.py",
    "trust/lockfile.py", "manifest.schema.json", "_internal/strictjson.py", "_internal/inputschema.py",
)  # fmt: skip


def stat_key(st: os.stat_result) -> StatKey:
    return (
        st.st_dev, st.st_ino, st.st_mode, st.st_nlink, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns,
        st.st_ctime_ns,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Entry:
    """What the index keeps about one package folder (see the module docstring)."""

    name: str
    scanned_ns: int  # wall clock when the load that read it started
    digest: str
    has_manifest: bool
    stats: tuple[tuple[str, StatKey], ...]  # "" is the folder itself
    files: tuple[PackageFile, ...]
    kept: Mapping[str, bytes]
    diagnostics: tuple[Diagnostic, ...]

    def racy(self, granularity_ns: int) -> bool:
        """A recorded time too close to when the entry was read: the content may have changed
        after it was read without changing its stat."""
        limit = self.scanned_ns - granularity_ns
        try:
            return any(key[7] >= limit or key[8] >= limit for _, key in self.stats)
        except (TypeError, IndexError):  # a malformed key: read the package again
            return True


@dataclass(frozen=True, slots=True)
class Header:
    """What an index's content depends on; an index with another header is never used."""

    source: str
    root: str
    policy: str
    code: str
    euid: int
    format: str = FORMAT

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "source": self.source,
            "root": self.root,
            "policy": self.policy,
            "code": self.code,
            "euid": self.euid,
        }


@dataclass(frozen=True, slots=True)
class Decoded:
    """What :func:`decode` made of an index file."""

    entries: dict[str, Entry]
    dropped: int = 0  # malformed entries left out (their packages are read again)
    problem: str | None = None  # why the whole file is unusable: corrupt, truncated, not an index
    foreign: bool = False  # ``problem`` is only another header: another tooldir, policy, user or root


def policy_digest(policy: Policy) -> str:
    return hashlib.sha256(policy.model_dump_json().encode()).hexdigest()


@cache
def code_digest() -> str:
    """sha256 over the Python version, tooldir's code that shapes a record, and the identity of the
    validators' compiled modules: another tooldir (or validator) never reuses these records."""
    import jsonschema_rs
    import pydantic_core

    h = hashlib.sha256(f"{sys.version}\n{sys.implementation.cache_tag}\n".encode())
    here = Path(__file__).resolve().parent
    for rel in _CODE:
        try:
            h.update(rel.encode() + b"\0" + (here / rel).read_bytes() + b"\0")
        except OSError:
            h.update(rel.encode() + b"\0missing\0")
    for module in (jsonschema_rs, pydantic_core):
        for path in (
            getattr(module, "__file__", None),
            getattr(getattr(module, "_pydantic_core", None), "__file__", None),
        ):
            if path:
                try:
                    st = os.stat(path)
                    h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
                except OSError:
                    h.update(f"{path}\0missing\0".encode())
    return h.hexdigest()


def header_for(root: RootSpec, policy: Policy) -> Header:
    return Header(str(root.source), root.path, policy_digest(policy), code_digest(), os.geteuid())


def index_path(state_dir: Path, root: RootSpec) -> Path:
    ident = hashlib.sha256(f"{root.source}\0{root.path}".encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return state_dir / INDEX_DIR / f"{ident}.idx"


# -- entries <-> candidates (pure) ---------------------------------------------------------------

_SHARED = stat.S_IWGRP | stat.S_IWOTH


def entry_from_candidate(candidate: Candidate, read: PackageScan, scanned_ns: int, euid: int) -> Entry | None:
    """The entry for a freshly read package, or None when it cannot be indexed: a refused file
    (no digest), a group/world-writable or foreign-owned entry, or stats that do not account for
    every file. ``read`` is the package's scan as discovery made it (the validated candidate's
    scan no longer holds the manifest's bytes or the stats)."""
    scan = read
    if candidate.server is not None:  # an MCP server package (server.json): always read, never indexed
        return None
    if scan.digest is None or scan.diagnostics or not scan.stats or scan.stats[0][0] != "":
        return None
    stats: list[tuple[str, StatKey]] = []
    nfiles = 0
    for rel, st in scan.stats:
        if st.st_mode & _SHARED or st.st_uid not in (euid, 0):
            return None
        if stat.S_ISREG(st.st_mode):
            nfiles += 1
        elif not stat.S_ISDIR(st.st_mode):
            return None
        stats.append((rel, stat_key(st)))
    if nfiles != len(scan.files):
        return None
    return Entry(
        name=scan.name,
        scanned_ns=scanned_ns,
        digest=scan.digest,
        has_manifest=candidate.manifest is not None,
        stats=tuple(stats),
        files=scan.files,
        kept=dict(scan.contents),
        diagnostics=candidate.diagnostics,
    )


def candidate_from_entry(entry: Entry, root: RootSpec) -> Candidate | None:
    """The candidate validation made of the indexed package, or None if the entry cannot give it."""
    root_path = root.path
    scan = PackageScan(
        source=root.source,
        root=root_path,
        name=entry.name,
        path=os.path.join(root_path, entry.name),
        files=entry.files,
        # as validation leaves it: the manifest's bytes are parsed, not kept (only lock/signatures)
        contents=MappingProxyType({k: v for k, v in entry.kept.items() if k != MANIFEST}),
        digest=entry.digest,
        diagnostics=(),
    )
    manifest: Manifest | None = None
    if entry.has_manifest:
        try:
            manifest = manifest_from_json(json.loads(entry.kept[MANIFEST], object_hook=FrozenDict))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
    return Candidate(scan, manifest, entry.diagnostics)


_EXECUTE_KEYS = frozenset({"command", "timeout_s", "network", "env", "secrets"})


def manifest_from_json(data: dict[str, Any]) -> Manifest:
    """The :class:`Manifest` that validation made of ``data`` (a manifest it accepted, parsed with
    every object a :class:`FrozenDict`), built without validating again: the same values and types
    (frozen input schema, tuples, the enum, a float timeout) and the same set fields.

    Raises:
        ValueError, KeyError, TypeError: ``data`` is not shaped like an accepted manifest.
    """
    raw = data["execute"]
    execute: dict[str, Any] = {"command": tuple(raw["command"])}
    if "timeout_s" in raw:
        execute["timeout_s"] = float(raw["timeout_s"])
    if "network" in raw:
        network = raw["network"]
        execute["network"] = (
            network if isinstance(network, bool) else NetworkAllow.model_construct(allow=tuple(network["allow"]))
        )
    if "env" in raw:
        execute["env"] = tuple(raw["env"])
    if "secrets" in raw:
        execute["secrets"] = tuple(raw["secrets"])
    if set(raw) - _EXECUTE_KEYS:  # never drop what the manifest says: an entry that cannot say it is unusable
        raise ValueError("unknown execute keys")
    values: dict[str, Any] = {
        "name": str(data["name"]),
        "description": str(data["description"]),
        "input_schema": _frozen_object(data["input_schema"]),
        "risk": Risk(data["risk"]),
        "execute": ExecuteSpec.model_construct(**execute),
    }
    if "keywords" in data:
        values["keywords"] = tuple(data["keywords"])
    if set(data) - set(values):
        raise ValueError("unknown manifest keys")
    return Manifest.model_construct(**values)


def _frozen_object(value: Any) -> FrozenDict:
    if type(value) is not FrozenDict:
        raise TypeError("not a JSON object")
    frozen: FrozenDict = freeze_arrays_in_place(value)
    return frozen


# -- the file (pure) ---------------------------------------------------------------------------


def encode(header: Header, entries: Mapping[str, Entry]) -> bytes:
    return b"".join(encode_chunks(header, entries))


_ROW = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


@dataclass(frozen=True, slots=True)
class Row:
    """One entry's table row encoded but for its kept files' blob offsets (known only when it is
    written), and those files' bytes: a forked worker encodes its packages' rows
    (:meth:`RootIndex.read_package`), so this process only splices the offsets in (:meth:`at`),
    and receives bytes instead of an :class:`Entry`'s objects."""

    name: str
    head: bytes  # ``[name,scanned_ns,digest,has_manifest,stats,files,`` (UTF-8)
    fnames: tuple[bytes, ...]  # each kept file's name as a JSON string, in blob order
    tail: bytes  # ``,diagnostics]``
    data: tuple[bytes, ...]  # each kept file's bytes, in blob order

    def at(self, offset: int) -> bytes:
        """The table row with the kept files at ``offset`` in the blob (what :func:`encode_row`
        gives)."""
        kept = []
        for fname, value in zip(self.fnames, self.data, strict=True):
            kept.append(b"[%s,%d,%d]" % (fname, offset, len(value)))
            offset += len(value)
        return b"".join((self.head, b"[", b",".join(kept), b"]", self.tail))


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


_STR = json.encoder.encode_basestring  # what the encoder (ensure_ascii=False) does with a str
_STAT_ROW = "[%s,%d,%d,%d,%d,%d,%d,%d,%d,%d]"
_JSON_BOOL = ("false", "true")


def fresh_row(e: Entry) -> Row:
    """:func:`prepare_row` of an entry just made from a package read by this load
    (:func:`entry_from_candidate`), whose stat keys, sizes and times are ``int`` by construction:
    the head formatted directly (``%d`` of an int is its JSON text, ``_STR`` the encoder's own
    string function), about twice as fast as the encoder walking the nested lists. Equal to
    :func:`prepare_row` (tests/unit/index/test_index.py)."""
    stats = ",".join([_STAT_ROW % (_STR(rel), *key) for rel, key in e.stats])
    files = ",".join([f"[{_STR(f.path)},{_STR(f.sha256)},{f.size:d},{_JSON_BOOL[f.executable]}]" for f in e.files])
    head = f"[{_STR(e.name)},{e.scanned_ns:d},{_STR(e.digest)},{_JSON_BOOL[e.has_manifest]},[{stats}],[{files}],"
    names = sorted(e.kept)
    return Row(
        e.name,
        _utf8(head),
        tuple([_utf8(_STR(n)) for n in names]),
        _utf8("," + _ROW(_diagnostic_rows(e.diagnostics)) + "]") if e.diagnostics else b",[]]",
        tuple([e.kept[n] for n in names]),
    )


def _diagnostic_rows(diagnostics: tuple[Diagnostic, ...]) -> list[list[Any]]:
    return [
        [str(d.severity), d.code, d.message, d.tool, None if d.source is None else str(d.source), d.path, d.pointer]
        for d in diagnostics
    ]


def prepare_row(e: Entry) -> Row:
    """``e``'s :class:`Row` (the JSON encoder's text, in three pieces around the kept files); for
    any entry, also one decoded from an index file (where a number may be a float equal to an
    int)."""
    names = sorted(e.kept)
    head = [
        e.name,
        e.scanned_ns,
        e.digest,
        e.has_manifest,
        [[rel, *key] for rel, key in e.stats],
        [[f.path, f.sha256, f.size, f.executable] for f in e.files],
    ]
    diags = _diagnostic_rows(e.diagnostics)
    return Row(
        e.name,
        _utf8(_ROW(head)[:-1] + ","),
        tuple([_utf8(_ROW(n)) for n in names]),
        _utf8("," + _ROW(diags) + "]"),
        tuple([e.kept[n] for n in names]),
    )


def encode_row(e: Entry, offset: int) -> tuple[bytes, list[bytes]]:
    """One entry's table row (its kept files at ``offset`` in the blob, by file name) and those
    bytes, in blob order: the table is these rows, comma-separated in a JSON array."""
    row = prepare_row(e)
    return row.at(offset), list(row.data)


def header_line(header: Header, table: int, blob: int) -> bytes:
    """``MAGIC``, the JSON header with the table's and the blob's lengths, and the newline."""
    head = {**header.to_json(), "table": table, "blob": blob}
    return MAGIC + json.dumps(head, separators=(",", ":")).encode() + b"\n"


def encode_chunks(header: Header, entries: Mapping[str, Entry]) -> list[bytes]:
    """The index file of ``entries`` (in name order) as chunks, in order. A load does not build
    this: :class:`RootIndex` streams the same rows and bytes to temporary files as it goes."""
    rows: list[bytes] = []
    chunks: list[bytes] = []  # the blob
    offset = 0
    for name in sorted(entries):
        row, data = encode_row(entries[name], offset)
        rows.append(row)
        chunks.extend(data)
        offset += sum(map(len, data))
    body = b"[" + b",".join(rows) + b"]"
    return [header_line(header, len(body), offset), body, *chunks]


def decode(data: bytes, header: Header) -> Decoded:
    """The entries of an index file written for ``header``; never raises for bad data."""
    if not data.startswith(MAGIC):
        return Decoded({}, problem="is not a tooldir index (bad magic)")
    end = data.find(b"\n", len(MAGIC))
    if end < 0:
        return Decoded({}, problem="is truncated (no header)")
    try:
        head = json.loads(data[len(MAGIC) : end])
        table_len, blob_len = head.pop("table"), head.pop("blob")
    except (ValueError, KeyError, TypeError, AttributeError):
        return Decoded({}, problem="has a malformed header")
    expected = header.to_json()
    if head != expected:
        differs = sorted(k for k, v in expected.items() if head.get(k) != v) or ["header"]
        return Decoded({}, problem=f"was written for another {', '.join(differs)}", foreign=True)
    if type(table_len) is not int or type(blob_len) is not int or len(data) != end + 1 + table_len + blob_len:
        return Decoded({}, problem="is truncated or overlong")
    start = end + 1
    try:
        table = json.loads(data[start : start + table_len].decode("utf-8", "surrogateescape"))
    except ValueError:
        return Decoded({}, problem="has a malformed table")
    if not isinstance(table, list):
        return Decoded({}, problem="has a malformed table")
    blob = memoryview(data)[start + table_len :]
    entries: dict[str, Entry] = {}
    dropped = 0
    for row in table:
        try:
            entry = _entry(row, blob)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError):
            entry = None
        if entry is None or entry.name in entries:
            dropped += 1
            continue
        entries[entry.name] = entry
    return Decoded(entries, dropped)


def _entry(row: list[Any], blob: memoryview) -> Entry | None:
    name, scanned_ns, digest, has_manifest, stats, files, kept, diags = row
    if not (isinstance(name, str) and type(scanned_ns) is int and isinstance(digest, str)):
        return None
    if type(has_manifest) is not bool:
        return None
    # stat numbers are not type-checked: anything but the nine ints of a real stat never compares
    # equal to one, so a malformed key only makes its package be read again
    keys = tuple([(rel, tuple(nums)) for rel, *nums in stats if type(rel) is str])
    if len(keys) != len(stats):
        return None
    pkg_files = []
    for path, sha, size, executable in files:
        if not (type(path) is str and type(sha) is str and type(size) is int and type(executable) is bool):
            return None
        pkg_files.append(PackageFile(path, sha, size, executable))
    hashes = {f.path: f.sha256 for f in pkg_files}
    contents: dict[str, bytes] = {}
    for fname, offset, length in kept:
        if type(offset) is not int or type(length) is not int or offset < 0 or offset + length > len(blob):
            return None
        data = bytes(blob[offset : offset + length])
        if hashlib.sha256(data).hexdigest() != hashes.get(fname):  # kept bytes are the file's bytes
            return None
        contents[fname] = data
    if has_manifest and MANIFEST not in contents:
        return None
    diagnostics = tuple(
        Diagnostic(
            Severity(sev), DiagnosticCode(code), str(msg), tool, None if src is None else Source(src), path, pointer
        )
        for sev, code, msg, tool, src, path, pointer in diags
    )
    return Entry(name, scanned_ns, digest, has_manifest, keys, tuple(pkg_files), contents, diagnostics)


# -- the I/O edge -------------------------------------------------------------------------------


def unchanged(entry: Entry, root_fd: int) -> bool:
    """Every recorded folder and file still has exactly its recorded stat (``lstat``: a link in
    its place never matches). Folders come before what is in them, so a folder replaced by a link
    is seen before anything is looked up through it."""
    name = entry.name
    for rel, key in entry.stats:
        try:
            st = os.stat(f"{name}/{rel}" if rel else name, dir_fd=root_fd, follow_symlinks=False)
        except (OSError, ValueError):
            return False
        if stat_key(st) != key:
            return False
    return True


def read_index(path: Path, header: Header) -> tuple[dict[str, Entry], str | None]:
    """(entries, why the file was ignored or None). Never raises for a bad file: a missing one is
    empty, anything else is ignored with a reason."""
    try:
        data = read_private(path, MAX_INDEX_BYTES, what="a content index")
    except Unreadable as exc:
        return {}, f"cannot be used ({exc.why})"
    if data is None:
        return {}, None
    decoded = decode(data, header)
    if decoded.foreign:  # another tooldir, policy, user or root: an expected miss, not a problem
        log.info("content index %s %s; rebuilding it", path, decoded.problem)
        return {}, None
    if decoded.problem is not None:
        return {}, decoded.problem
    if decoded.dropped:
        log.warning(
            "content index %s: %d malformed entries dropped; their packages are read again", path, decoded.dropped
        )
    return decoded.entries, None


class _Spool:
    """An unnamed temporary file (0600, in the index's own folder) that rows or kept bytes are
    appended to as a load goes, and read back in pieces when the index is written."""

    __slots__ = ("file", "size")

    #: write buffer: rows (~1 KB) and manifests (~3 KB) mostly exceed the default 8 KiB buffer's
    #: room, so it made one write(2) per row; this makes one per MiB (10k rows: 63 -> 14 ms)
    BUFFER = 1 << 20

    def __init__(self, folder: Path) -> None:
        self.file: IO[bytes] = tempfile.TemporaryFile(dir=folder, buffering=self.BUFFER)  # noqa: SIM115 - closed by RootIndex
        self.size = 0

    def write(self, data: bytes) -> None:
        self.file.write(data)
        self.size += len(data)

    def chunks(self) -> Iterator[bytes]:
        self.file.flush()
        self.file.seek(0)
        while chunk := self.file.read(1 << 20):
            yield chunk


@dataclass(slots=True)
class RootIndex:
    """The index of one root during one load: :meth:`reuse` answers from it when it can,
    :meth:`record` takes what :meth:`read_package` read, and :meth:`save` writes it back when
    anything changed.

    The new index is not kept in memory: from the first package that changed on, every entry's
    table row and kept bytes are appended to two unnamed temporary files in the index's folder
    (entries reused before that are only remembered, and written then), and :meth:`save` writes
    the file atomically from them. A cold 10k load so never holds the 26 MB of manifest bytes
    (validation has dropped them from the candidates) nor the table. ``keep=False`` (a
    ``read_only`` load, which writes nothing to user state) keeps and writes nothing."""

    path: Path
    header: Header
    limits: Limits
    policy: Policy
    scanned_ns: int
    granularity_ns: int = RACY_NS
    #: entries of the index file read at the start; each is taken out when its package is looked up
    old: dict[str, Entry] = field(default_factory=dict)
    problem: str | None = None
    reused: int = 0  # packages answered from the index
    read: int = 0  # packages read and validated
    keep: bool = True  # False: a read-only load, nothing kept or written
    names: set[str] = field(default_factory=set)  # the packages of the new index
    _changed: bool = False
    _pending: list[Entry | Row] = field(default_factory=list)  # reused, not yet written (nothing changed so far)
    _table: _Spool | None = None
    _blob: _Spool | None = None
    _unwritable: str | None = None  # why the new index cannot be written
    _oversize: bool = False  # the new index would be larger than MAX_INDEX_BYTES

    @classmethod
    def open(cls, state_dir: Path, root: RootSpec, policy: Policy, *, keep: bool = True) -> RootIndex:
        path = index_path(state_dir, root)
        header = header_for(root, policy)
        old, problem = read_index(path, header)
        return cls(path, header, policy.limits, policy, time.time_ns(), RACY_NS, old, problem, keep=keep)

    def reuse(self, root_fd: int, root: RootSpec, name: str) -> Candidate | None:
        """The candidate of package ``name`` from its clean entry (recorded as kept), or None:
        the package must be read (:meth:`read_package`, then :meth:`record`)."""
        entry = self.old.pop(name, None)
        if entry is not None and not entry.racy(self.granularity_ns) and unchanged(entry, root_fd):
            found = candidate_from_entry(entry, root)
            if found is not None:
                self.reused += 1
                self._add(entry)
                return found
        self._changed = self._changed or entry is not None  # an entry that no longer holds
        return None

    def read_package(self, root_fd: int, root: RootSpec, name: str) -> tuple[Candidate, Row | None]:
        """Read and validate package ``name``: its candidate and the encoded row to record for it
        (None: not indexable). Pure with respect to this index (a forked worker may run it)."""
        scan = scan_package(root_fd, root, name, self.limits)
        candidate = validate_package(scan, self.policy)
        entry = entry_from_candidate(candidate, scan, self.scanned_ns, self.header.euid)
        return candidate, None if entry is None else fresh_row(entry)

    def record(self, name: str, row: Row | None) -> None:
        """Note that package ``name`` was read, with the row :meth:`read_package` made of it
        (written to the new index from here on, see :meth:`_add`)."""
        self.read += 1
        if row is not None:
            self._changed = True
            self._add(row)

    @property
    def changed(self) -> bool:
        """The new index differs from the file read at the start."""
        return self._changed or bool(self.old)  # what is left of ``old`` is gone from the root

    def _add(self, entry: Entry | Row) -> None:
        if not self.keep or entry.name in self.names:
            return
        self.names.add(entry.name)
        if not self._changed:
            self._pending.append(entry)  # a load that changes nothing writes nothing
            return
        if self._pending:
            pending, self._pending = self._pending, []
            for e in pending:
                self._write(e)
        self._write(entry)

    def _spools(self) -> tuple[_Spool, _Spool] | None:
        """The table and blob spools, made at the first entry written; None once writing failed."""
        if self._unwritable is not None or self._oversize:
            return None
        if self._table is None or self._blob is None:
            try:
                private_dirs(self.path.parent)
                self._table, self._blob = _Spool(self.path.parent), _Spool(self.path.parent)
            except OSError as exc:
                self._fail(str(exc.strerror or exc))
                return None
        return self._table, self._blob

    def _write(self, entry: Entry | Row) -> None:
        spools = self._spools()
        if spools is None:
            return
        table, blob = spools
        prepared = entry if isinstance(entry, Row) else prepare_row(entry)
        row, data = prepared.at(blob.size), prepared.data
        if table.size + blob.size + len(row) + sum(map(len, data)) > MAX_INDEX_BYTES:
            self._oversize = True  # the file is not written (and the old one removed)
            self._close()
            return
        try:
            table.write(b"," + row if table.size else row)
            for value in data:
                blob.write(value)
        except OSError as exc:
            self._fail(str(exc.strerror or exc))

    def _fail(self, why: str) -> None:
        self._unwritable = why
        self._close()

    def _close(self) -> None:
        for spool in (self._table, self._blob):
            if spool is not None:
                with contextlib.suppress(OSError):  # flushing its buffer failed: it is dropped anyway
                    spool.file.close()
        self._table = self._blob = None

    def save(self) -> None:
        """Write the index if anything changed (or the old file was unusable). A failure is a
        logged warning, never an error of the load: the next load reads those packages again."""
        log.debug("content index %s: %d packages reused, %d read", self.path, self.reused, self.read)
        try:
            self._save()
        except OSError as exc:
            log.warning("cannot write the content index %s: %s", self.path, exc.strerror or exc)
        finally:
            self._close()
            self._pending = []

    def _save(self) -> None:
        """Raises OSError."""
        if not self.keep or (not self.changed and self.problem is None):
            return
        # nothing was read, yet the file is rewritten (packages removed, or the old file unusable)
        pending, self._pending = self._pending, []
        for e in pending:
            self._write(e)
        spools = self._spools()
        if spools is None:
            if self._oversize:
                self.path.unlink(missing_ok=True)
            else:
                log.warning("cannot write the content index %s: %s", self.path, self._unwritable)
            return
        table, blob = spools
        head = header_line(self.header, table.size + 2, blob.size)
        if len(head) + table.size + 2 + blob.size > MAX_INDEX_BYTES:
            self.path.unlink(missing_ok=True)
            return
        write_atomic(self.path, chain((head, b"["), table.chunks(), (b"]",), blob.chunks()))

    def diagnostic(self, root: RootSpec) -> Diagnostic | None:
        if self.problem is None:
            return None
        return warning(
            DiagnosticCode.INDEX_IGNORED,
            f"content index {self.path} for root {root.path} {self.problem}; ignored, every package was read again "
            "and the index rebuilt",
            source=root.source,
            path=str(self.path),
        )


def enabled(env: Mapping[str, str] | None = None) -> bool:
    """False when ``$TOOLDIR_NO_INDEX`` is ``1``."""
    return (os.environ if env is None else env).get(ENV_DISABLE, "") != "1"
