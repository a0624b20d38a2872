"""Roots -> PackageScan: the only code that reads tool directories.

Discovery reads bytes and nothing else: it never imports, executes or sources anything. It walks
with directory file descriptors and ``O_NOFOLLOW`` so a path can never leave its root (no string
prefix checks anywhere), opens files ``O_NONBLOCK`` so a FIFO cannot block it, accepts only regular
files with one link, checks owner and mode of every directory and file, and bounds sizes and counts.
"""

from __future__ import annotations

import enum
import errno
import hashlib
import os
import re
import stat
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from hashlib import sha256
from types import MappingProxyType

from .._internal.ownership import unsafe_mode
from ..codes import DiagnosticCode
from ..errors import DiscoveryError
from ..model import Diagnostic, PackageFile, Source, error, info
from ..policy import Limits
from ..text import CONTROL, character_class

MANIFEST = "schema.json"
#: The manifest of an MCP server package (DESIGN §10), held instead of schema.json.
SERVER_MANIFEST = "server.json"
MANIFESTS = frozenset({MANIFEST, SERVER_MANIFEST})
# The lock and its signatures (tooldir.trust.lockfile reads them): kept in memory during the scan and
# never listed in the lock itself.
LOCK = "tool.lock"
MINISIG = "tool.lock.minisig"
SSHSIG = "tool.lock.sig"
UNLISTED = frozenset({LOCK, MINISIG, SSHSIG})
#: Files whose bytes later stages need (trust); every other file is only hashed.
KEPT_FILES = frozenset({*MANIFESTS, *UNLISTED})

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_CHUNK = 1 << 20
_GROUP_OR_WORLD_WRITABLE = stat.S_IWGRP | stat.S_IWOTH


class EntryKind(enum.Enum):
    """What a folder entry is, never following a link: the one classification of discovery, the
    loader's incremental refresh and the watcher."""

    FILE = "file"  # a regular file
    DIR = "dir"  # a real folder
    LINK = "link"  # a symbolic link, to whatever
    OTHER = "other"  # FIFO, socket or device


def entry_kind(entry: os.DirEntry[str]) -> EntryKind:
    """From the listing itself (d_type): a FIFO or device is never opened, a link never followed."""
    if entry.is_file(follow_symlinks=False):
        return EntryKind.FILE
    if entry.is_dir(follow_symlinks=False):
        return EntryKind.DIR
    return EntryKind.LINK if entry.is_symlink() else EntryKind.OTHER


def mode_kind(mode: int) -> EntryKind:
    """The same classification from an ``lstat`` mode."""
    if stat.S_ISREG(mode):
        return EntryKind.FILE
    if stat.S_ISDIR(mode):
        return EntryKind.DIR
    return EntryKind.LINK if stat.S_ISLNK(mode) else EntryKind.OTHER


def is_hidden(name: str) -> bool:
    """A dot name directly under a root: editor and VCS droppings; never a valid tool name, never
    loaded, never reported, never watched."""
    return name.startswith(".")


def root_entry(root: RootSpec, name: str, kind: EntryKind) -> Diagnostic | None:
    """Why an entry directly under a root is not a tool folder, or None when it is one to scan
    (or a hidden name, to skip: see :func:`is_hidden`)."""
    if is_hidden(name) or kind is EntryKind.DIR:  # a real folder (a link to one is not a dir here)
        return None
    shown = display_name(name)  # only entries that are reported need a printable path
    path = os.path.join(root.path, shown)
    where = {"tool": shown, "source": root.source, "path": path}
    if kind is EntryKind.LINK:
        return error(DiagnosticCode.SYMLINK, f"tool folder {path} is a symbolic link; not followed", **where)
    if kind is EntryKind.FILE:
        return info(DiagnosticCode.STRAY_FILE, f"{path} is a file, not a tool folder; ignored", **where)
    return error(DiagnosticCode.NOT_REGULAR_FILE, f"{path} is a FIFO, socket or device, not a tool folder", **where)


@dataclass(frozen=True, slots=True)
class RootSpec:
    """A tool root: ``anchor`` is trusted as given (the user named it); every component in
    ``parts`` below it is opened without following symlinks."""

    source: Source
    anchor: str
    parts: tuple[str, ...] = ()

    @property
    def path(self) -> str:
        return os.path.join(self.anchor, *self.parts)


@dataclass(frozen=True, slots=True)
class PackageScan:
    """What discovery found in one tool folder. ``digest`` is None when any file was refused."""

    source: Source
    root: str
    name: str  # the folder's name
    path: str
    files: tuple[PackageFile, ...]
    contents: Mapping[str, bytes]  # bytes of KEPT_FILES present (a Candidate's scan: no longer the manifest's)
    digest: str | None
    diagnostics: tuple[Diagnostic, ...]
    #: ``os.fstat`` of the package folder (""), of every sub-folder and file, by relative path, each
    #: taken on the opened descriptor before it was listed or read (what tooldir.read.index keeps)
    stats: tuple[tuple[str, os.stat_result], ...] = field(default=(), compare=False, repr=False)


def package_digest(files: Iterable[PackageFile]) -> str:
    """sha256 over a canonical listing of every file: sorted path, content hash, exec bit."""
    return _digest_sorted(sorted(files, key=_by_path))


def _by_path(f: PackageFile) -> str:
    return f.path


def _digest_sorted(files: Iterable[PackageFile]) -> str:
    listing = "".join(f"{f.path}\0{f.sha256}\0{'x' if f.executable else '-'}\n" for f in files)
    return "sha256:" + hashlib.sha256(b"tooldir-package-v1\n" + listing.encode()).hexdigest()


def open_root(root: RootSpec) -> tuple[int | None, list[Diagnostic]]:
    """Open a root directory safely. Returns (fd or None, diagnostics). A missing root is empty."""
    euid = os.geteuid()
    diags: list[Diagnostic] = []
    where = {"source": root.source, "path": root.path}
    try:
        fd = os.open(root.anchor, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, []
    except NotADirectoryError:
        return None, [error(DiagnosticCode.NOT_REGULAR_FILE, f"root anchor {root.anchor} is not a directory", **where)]
    except OSError as exc:
        return None, [error(DiagnosticCode.UNREADABLE, f"cannot open {root.anchor}: {exc.strerror}", **where)]
    current = root.anchor
    for part in root.parts:
        current = os.path.join(current, part)
        try:
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            os.close(fd)
            return None, []
        except OSError as exc:
            os.close(fd)
            code, why = _open_failure(exc)
            if code == DiagnosticCode.NOT_REGULAR_FILE and os.path.islink(current):
                code, why = DiagnosticCode.SYMLINK, "is a symbolic link"
            return None, [error(code, f"root component {current} {why}", **where)]
        os.close(fd)
        fd = child
        problem = unsafe_mode(os.fstat(fd), euid)
        if problem:
            os.close(fd)
            return None, [error(DiagnosticCode.UNSAFE_PERMISSIONS, f"root component {current} is {problem}", **where)]
    if not root.parts:
        problem = unsafe_mode(os.fstat(fd), euid)
        if problem:
            os.close(fd)
            return None, [error(DiagnosticCode.UNSAFE_PERMISSIONS, f"root {current} is {problem}", **where)]
    return fd, diags


def _open_failure(exc: OSError) -> tuple[DiagnosticCode, str]:
    if exc.errno == errno.ELOOP:
        return DiagnosticCode.SYMLINK, "is a symbolic link"
    if exc.errno == errno.ENOTDIR:
        return DiagnosticCode.NOT_REGULAR_FILE, "is not a directory"
    if exc.errno == errno.ENXIO:
        return DiagnosticCode.NOT_REGULAR_FILE, "is a socket or device"
    return DiagnosticCode.UNREADABLE, f"cannot be opened: {exc.strerror}"


def display_name(name: str) -> str:
    """``name`` as printable text: bytes that are not UTF-8 (decoded by the OS layer as lone
    surrogates) become ``\\xNN`` escapes, so diagnostics can always be encoded and shown."""
    if name.isascii():
        return name
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return name


def overfull_root(root: RootSpec, limit: int) -> Diagnostic:
    """The error for a root with more than ``limit`` entries (policy ``limits.max_root_entries``):
    nothing is loaded from it, and the message says so, names the key and how to raise it."""
    return error(
        DiagnosticCode.TOO_MANY_ENTRIES,
        f"root {root.path} has more than {limit} entries (policy limits.max_root_entries); nothing from this "
        "root is loaded (other roots load as usual); to load it, raise max_root_entries under [limits] "
        "in your policy file",
        source=root.source,
        path=root.path,
    )


def list_packages(root_fd: int, root: RootSpec, limits: Limits) -> tuple[list[str], list[Diagnostic]] | None:
    """Names of candidate tool folders directly under the root, with diagnostics for entries that
    are not folders. None when the root has more entries than allowed (the whole root is refused)."""
    names: list[str] = []
    diags: list[Diagnostic] = []
    count = 0
    with os.scandir(root_fd) as entries:
        for entry in entries:
            count += 1
            if count > limits.max_root_entries:
                return None
            name = entry.name
            kind = entry_kind(entry)
            problem = root_entry(root, name, kind)
            if problem is not None:
                diags.append(problem)
            elif kind is EntryKind.DIR and not is_hidden(name):
                names.append(name)
    names.sort()
    return names, diags


def _first(item: tuple[str, EntryKind]) -> str:
    return item[0]


class _Walk:
    """State of one package walk (bounded: files, bytes, depth)."""

    __slots__ = (
        "contents", "diags", "euid", "files", "limits", "name", "pkg_path", "plain_names", "source", "stats", "total",
    )  # fmt: skip

    def __init__(self, source: Source, name: str, pkg_path: str, limits: Limits) -> None:
        self.source = source
        self.name = name
        self.pkg_path = pkg_path
        self.limits = limits
        self.euid = os.geteuid()
        self.files: list[PackageFile] = []
        self.contents: dict[str, bytes] = {}
        self.stats: list[tuple[str, os.stat_result]] = []
        self.diags: list[Diagnostic] = []
        self.total = 0
        self.plain_names = True  # every name printable ASCII: nothing for _check_file_names to find

    def fail(self, code: DiagnosticCode, rel: str, message: str) -> None:
        path = os.path.join(self.pkg_path, rel) if rel else self.pkg_path
        self.diags.append(error(code, message, tool=self.name, source=self.source, path=path))

    def walk_dir(self, dir_fd: int, prefix: str, depth: int) -> bool:
        """Walk one directory; returns False when a limit stops the walk."""
        if depth > self.limits.max_package_depth:
            self.fail(DiagnosticCode.TOO_DEEP, prefix, f"folders nested deeper than {self.limits.max_package_depth}")
            return False
        cap = self.limits.max_package_files
        entries: list[tuple[str, EntryKind]] = []
        with os.scandir(dir_fd) as it:
            for e in it:
                # d_type from the directory itself: links, folders and special files are known
                # without opening them (a FIFO or device is never opened at all)
                entries.append((e.name, entry_kind(e)))
                if len(entries) > cap:  # bounded memory even for a folder with millions of entries
                    self.fail(
                        DiagnosticCode.TOO_MANY_ENTRIES, prefix, f"more than {cap} entries in folder {prefix or '.'}"
                    )
                    return False
        entries.sort(key=_first)
        for name, kind in entries:
            rel = prefix + name
            if not (name.isascii() and name.isprintable()):
                self.plain_names = False
            if display_name(name) != name:
                self.fail(
                    DiagnosticCode.INVALID_ENCODING,
                    display_name(rel),
                    f"{display_name(rel)!r}: file names must be UTF-8",
                )
                continue
            if kind is EntryKind.FILE:
                if not self.read_file(dir_fd, name, rel):
                    return False
            elif kind is EntryKind.LINK:
                self.fail(DiagnosticCode.SYMLINK, rel, f"{rel} is a symbolic link; tool packages may not contain links")
            elif kind is EntryKind.OTHER:
                self.fail(DiagnosticCode.NOT_REGULAR_FILE, rel, f"{rel} is not a regular file (FIFO, socket or device)")
            elif rel in KEPT_FILES:
                self.fail(DiagnosticCode.NOT_REGULAR_FILE, rel, f"{rel} is a folder, not a regular file")
            elif not self.walk_subdir(dir_fd, name, rel, depth):
                return False
        return True

    def walk_subdir(self, dir_fd: int, name: str, rel: str, depth: int) -> bool:
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            code, why = _open_failure(exc)
            self.fail(code, rel, f"folder {rel} {why}")
            return True
        try:
            st = os.fstat(child)
            self.stats.append((rel, st))
            problem = unsafe_mode(st, self.euid)
            if problem:
                self.fail(DiagnosticCode.UNSAFE_PERMISSIONS, rel, f"folder {rel} is {problem}")
                return True
            return self.walk_dir(child, rel + "/", depth + 1)
        finally:
            os.close(child)

    def read_file(self, dir_fd: int, name: str, rel: str) -> bool:
        limits = self.limits
        if len(self.files) >= limits.max_package_files:
            self.fail(DiagnosticCode.TOO_MANY_ENTRIES, "", f"more than {limits.max_package_files} files in the package")
            return False
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            code, why = _open_failure(exc)
            self.fail(code, rel, f"{rel} {why}")
            return True
        try:
            st = os.fstat(fd)
            self.stats.append((rel, st))
            mode = st.st_mode
            if not stat.S_ISREG(mode):  # replaced by a FIFO or device after the listing
                self.fail(DiagnosticCode.NOT_REGULAR_FILE, rel, f"{rel} is not a regular file (FIFO, socket or device)")
                return True
            if st.st_nlink != 1:
                self.fail(
                    DiagnosticCode.HARDLINK,
                    rel,
                    f"{rel} has {st.st_nlink} hard links; it may be changed from elsewhere",
                )
                return True
            if mode & _GROUP_OR_WORLD_WRITABLE or (st.st_uid not in (self.euid, 0)):
                problem = unsafe_mode(st, self.euid)
                if problem is not None:
                    self.fail(DiagnosticCode.UNSAFE_PERMISSIONS, rel, f"{rel} is {problem}")
                    return True
            limit = limits.max_manifest_bytes if rel in MANIFESTS else limits.max_file_bytes
            size = st.st_size
            if size > limit:
                self.fail(DiagnosticCode.TOO_LARGE, rel, f"{rel} is {size} bytes; the limit is {limit}")
                return True
            self.total += size
            if self.total > limits.max_package_bytes:
                self.fail(DiagnosticCode.TOO_LARGE, "", f"package exceeds {limits.max_package_bytes} bytes in total")
                return False
            # One read normally suffices: a short read of a regular file means end of file.
            data = os.read(fd, size + 1) if size < _CHUNK else b""
            if len(data) > size or size >= _CHUNK:
                rest = _read_bounded(fd, limit - len(data))
                if rest is None or len(data) > limit:
                    self.fail(DiagnosticCode.TOO_LARGE, rel, f"{rel} grew past {limit} bytes while being read")
                    return True
                data += rest
        finally:
            os.close(fd)
        if rel in KEPT_FILES:
            self.contents[rel] = data
        self.files.append(PackageFile(rel, sha256(data).hexdigest(), len(data), bool(mode & stat.S_IXUSR)))
        return True


def _read_bounded(fd: int, limit: int) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = os.read(fd, _CHUNK)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)


def scan_package(root_fd: int, root: RootSpec, name: str, limits: Limits) -> PackageScan:
    """Read one tool folder ``name`` directly under the open root."""
    root_path = root.path
    shown = display_name(name)
    pkg_path = os.path.join(root_path, shown)
    walk = _Walk(root.source, shown, pkg_path, limits)
    if shown != name:  # never a valid tool name; nothing is read
        walk.fail(DiagnosticCode.INVALID_NAME, "", f"tool folder name {shown!r} is not UTF-8")
        return _finish(walk, root_path, False)
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=root_fd)
    except OSError as exc:
        code, why = _open_failure(exc)
        if exc.errno == errno.ENOENT:
            code, why = DiagnosticCode.MISSING_FILE, "disappeared while loading"
        walk.fail(code, "", f"tool folder {pkg_path} {why}")
        return _finish(walk, root_path, False)
    try:
        st = os.fstat(fd)
        walk.stats.append(("", st))
        problem = unsafe_mode(st, walk.euid)
        if problem:
            walk.fail(DiagnosticCode.UNSAFE_PERMISSIONS, "", f"tool folder {pkg_path} is {problem}")
        else:
            walk.walk_dir(fd, "", 1)
    finally:
        os.close(fd)
    return _finish(walk, root_path, True)


def scan_one(root: RootSpec, name: str, limits: Limits) -> PackageScan:
    """Open ``root`` safely and read its one tool folder ``name`` (``tooldir lock``, ``verify``,
    ``allow``): the same checks as a full load, for one package.

    Raises:
        DiscoveryError: the root itself cannot be opened (missing, a symlink, unsafe permissions).
    """
    fd, diags = open_root(root)
    if fd is None:
        detail = "; ".join(d.message for d in diags) or "it does not exist"
        raise DiscoveryError(f"cannot open tool root {root.path}: {detail}")
    try:
        return scan_package(fd, root, name, limits)
    finally:
        os.close(fd)


#: Controls in a file name (tab, LF and CR too: a name with a line break forges listing lines).
_NAME_CONTROL = re.compile(character_class((CONTROL,), extra="\t\n\r"))


def _check_file_names(walk: _Walk) -> None:
    """Names a reviewer cannot read for what they are: a control character in a file name
    (``control-character``), or two names -- of files or of the folders above them -- that are
    equal after Unicode NFC normalisation, so they look identical (``ambiguous-file-name``).
    Names differing only in case look different and stay distinct files."""
    paths = [f.path for f in walk.files]
    joined = "/".join(paths)
    if _NAME_CONTROL.search(joined):
        for rel in paths:
            if _NAME_CONTROL.search(rel):
                shown = rel.encode("unicode_escape").decode("ascii")
                walk.fail(DiagnosticCode.CONTROL_CHARACTER, "", f"file name {shown} holds control characters")
    if joined.isascii():
        return
    by_form: dict[str, str] = {}
    for rel in paths:
        parts = rel.split("/")
        for end in range(1, len(parts) + 1):
            name = "/".join(parts[:end])
            if name.isascii():
                continue
            form = unicodedata.normalize("NFC", name)
            other = by_form.setdefault(form, name)
            if other != name:
                by_form[form] = name  # report each new spelling once
                walk.fail(
                    DiagnosticCode.AMBIGUOUS_FILE_NAME,
                    name,
                    f"{other!a} and {name!a} are the same name after Unicode NFC normalisation; they look identical",
                )


def _finish(walk: _Walk, root_path: str, opened: bool) -> PackageScan:
    if opened and not walk.plain_names:
        _check_file_names(walk)
    if opened and not walk.diags and MANIFESTS.isdisjoint(walk.contents):
        walk.fail(
            DiagnosticCode.MISSING_MANIFEST, "", f"no {MANIFEST} (or {SERVER_MANIFEST}) in tool folder {walk.pkg_path}"
        )
    ok = not walk.diags
    files = tuple(sorted(walk.files, key=_by_path))
    return PackageScan(
        source=walk.source,
        root=root_path,
        name=walk.name,
        path=walk.pkg_path,
        files=files,
        contents=MappingProxyType(walk.contents),
        digest=_digest_sorted(files) if ok else None,
        diagnostics=tuple(walk.diags),
        stats=tuple(walk.stats),
    )
