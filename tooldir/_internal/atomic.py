"""The one atomic file writer: a temp file beside the target (``O_EXCL``, ``O_NOFOLLOW``, 0600),
written and fsynced, given its mode, then renamed over the target with ``os.replace``. A crash
leaves the old file or the new one, never a torn one; a symlink at the target is replaced, never
followed. (The audit chain head is the deliberate exception: two fixed slots written in place,
see :mod:`tooldir.state`.)"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path


def write_atomic(path: Path, data: bytes | Iterable[bytes], *, mode: int = 0o600, sync_dir: bool = False) -> None:
    """Replace ``path`` with ``data`` (bytes, or chunks written in order: a large file need not be
    joined, or even held, in memory first) atomically. ``sync_dir`` also fsyncs the folder, so the rename itself
    survives a power loss. Raises OSError; the temp file never outlives a failure."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # O_EXCL | O_NOFOLLOW, 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            if isinstance(data, bytes):
                fh.write(data)
            else:
                fh.writelines(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if sync_dir:
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def private_dirs(path: Path) -> None:
    """Make ``path`` and every missing folder above it 0700, whatever the umask: ``Path.mkdir(
    parents=True, mode=...)`` gives the folders above the last one the umask's mode, so under
    umask 000 the state folder made as the parent of ``state/index`` would be 0777 (which
    tooldir then refuses: :func:`tooldir._internal.ownership.path_problem`)."""
    missing = []
    folder = Path(path)
    while not folder.is_dir():
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o700)
