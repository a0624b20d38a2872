"""A private, content-addressed copy of each verified package: where a run's checked bytes come from.

``verified_files(record, base)`` returns a directory holding exactly the bytes the snapshot verified
(``ToolRecord.files``), and those bytes. The first time, each file is re-read from the package
*without following symlinks* (fd-relative ``O_NOFOLLOW``, like discovery), hashed, and compared
with its recorded sha256; any difference (a file swapped after verification) raises ``changed-since-verification``
and nothing is copied. The copy is built in a temp folder and renamed into
``<base>/<package digest>`` (files 0444/0555, folders 0555), so a later swap in the package has no
effect: the verified copy runs, or nothing does. On reuse every file is hashed again (it is small
and cheap next to a process spawn) so the store is never trusted blindly either.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

from .._internal.atomic import private_dirs
from ..codes import CallErrorCode
from ..errors import SandboxError
from ..model import ToolRecord

MAX_COPIES = 512
"""Copies kept in the store; the least recently created beyond this are removed."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


def _changed(record: ToolRecord, message: str) -> SandboxError:
    return SandboxError(
        f"{record.name}: {message}; the package changed after it was verified, nothing ran (reload to re-verify)",
        code=CallErrorCode.CHANGED_SINCE_VERIFICATION,
    )


def _open_dir_path(path: str) -> int:
    """Open an absolute directory path one component at a time, never following a symlink."""
    fd = os.open("/", _DIR_FLAGS)
    try:
        for part in Path(path).parts[1:]:
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_verified(pkg_fd: int, rel: str, record: ToolRecord, sha256: str, size: int) -> bytes:
    parts = rel.split("/")
    dir_fd = os.dup(pkg_fd)
    try:
        for part in parts[:-1]:
            child = os.open(part, _DIR_FLAGS, dir_fd=dir_fd)
            os.close(dir_fd)
            dir_fd = child
        fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        why = "is now a symbolic link" if exc.errno in (errno.ELOOP, errno.ENOTDIR) else exc.strerror
        raise _changed(record, f"{rel} {why}") from None
    finally:
        os.close(dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _changed(record, f"{rel} is no longer a regular file")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            total += len(chunk)
            if total > size:
                raise _changed(record, f"{rel} grew")
            chunks.append(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if hashlib.sha256(data).hexdigest() != sha256:
        raise _changed(record, f"{rel} does not match its verified sha256")
    return data


def _read_copy(target: Path, record: ToolRecord) -> list[bytes] | None:
    """The bytes of every file of an existing copy, or None if any is missing or differs."""
    found: list[bytes] = []
    for f in record.files:
        try:
            fd = os.open(target / f.path, _FILE_FLAGS)
        except OSError:
            return None
        try:
            with os.fdopen(fd, "rb") as fh:
                data = fh.read(f.size + 1)
        except OSError:
            return None
        if hashlib.sha256(data).hexdigest() != f.sha256:
            return None
        found.append(data)
    return found


def verified_files(record: ToolRecord, base: Path, *, create: bool = True) -> tuple[Path, list[bytes]]:
    """The verified copy of ``record``'s package under ``base`` (created if needed) and the bytes
    of each of ``record.files``, in order, each checked against its sha256 as it was read.
    ``create=False`` (work done ahead, in the background): never write the store; a missing or
    damaged copy is ``sandbox-failed``.

    Raises:
        SandboxError: ``changed-since-verification`` if the package no longer matches;
            ``sandbox-failed`` if the store cannot be written.
    """
    if record.path is None or record.digest is None or not record.files:
        raise SandboxError(f"{record.name} has no verified package to run", code=CallErrorCode.SANDBOX_FAILED)
    target = base / record.digest.removeprefix("sha256:")
    if target.is_dir():
        found = _read_copy(target, record)
        if found is not None:
            return target, found
    if not create:
        raise SandboxError(f"no verified copy of {record.name} in {base} yet", code=CallErrorCode.SANDBOX_FAILED)
    try:
        private_dirs(base)
        staging = Path(tempfile.mkdtemp(prefix=".tmp-", dir=base))
    except OSError as exc:
        raise SandboxError(
            f"cannot write the package store {base}: {exc.strerror}", code=CallErrorCode.SANDBOX_FAILED
        ) from None
    try:
        try:
            pkg_fd = _open_dir_path(record.path)
        except OSError as exc:
            raise _changed(record, f"package folder cannot be opened safely ({exc.strerror})") from None
        try:
            contents = [_read_verified(pkg_fd, f.path, record, f.sha256, f.size) for f in record.files]
        finally:
            os.close(pkg_fd)
        write_read_only(staging, record, contents)
        if target.is_symlink():
            target.unlink()
        elif target.is_dir() and _read_copy(target, record) is not None:  # a concurrent run made it
            remove_tree(staging)
            return target, contents
        elif target.exists():  # damaged earlier copy: replace it
            remove_tree(target)
        os.rename(staging, target)
        _prune(base, keep=MAX_COPIES)
    except OSError as exc:
        remove_tree(staging)
        found = _read_copy(target, record) if target.is_dir() else None
        if found is not None:  # a concurrent run won the rename
            return target, found
        raise SandboxError(f"cannot write the package store {base}: {exc}", code=CallErrorCode.SANDBOX_FAILED) from None
    except BaseException:
        remove_tree(staging)
        raise
    return target, contents


def write_read_only(folder: Path, record: ToolRecord, contents: list[bytes]) -> None:
    """Write each of ``record.files`` with its bytes under ``folder``, then make the tree read-only
    (files 0444, or 0555 if executable; folders 0555). :func:`remove_tree` removes it again."""
    for f, data in zip(record.files, contents, strict=True):
        dest = folder / f.path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        os.chmod(dest, 0o555 if f.executable else 0o444)
    for sub, _, _ in os.walk(folder):
        os.chmod(sub, 0o555)  # noqa: S103 - read-only copy; nobody may write it


def _prune(base: Path, *, keep: int) -> None:
    try:
        entries = [e for e in os.scandir(base) if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")]
    except OSError:
        return
    if len(entries) <= keep:
        return
    entries.sort(key=lambda e: e.stat(follow_symlinks=False).st_mtime)
    for entry in entries[: len(entries) - keep]:
        remove_tree(Path(entry.path))


def remove_tree(path: Path) -> None:
    """Remove a read-only tree made by :func:`write_read_only` (its folders are made writable first)."""
    for folder, _, _ in os.walk(path):
        os.chmod(folder, 0o700)
    shutil.rmtree(path, ignore_errors=True)
