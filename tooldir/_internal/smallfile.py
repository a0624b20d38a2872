"""Read one small configuration file whole, the way every file that decides something is read:
opened without blocking (a FIFO or a device is refused by its kind, never waited on or read until
memory runs out), only a regular file, at most ``max_bytes`` (checked before reading and again
while reading, in case it grows), looked at through the descriptor that is read (no gap between
the check and the read). Standard library only.

Each caller turns :class:`Unreadable` into its own error (PolicyError, SecretsFileError, ...);
its ``why`` is a phrase that fits after the file's name ("it is a FIFO, not a regular file").

:func:`read_private` is the one way to read a file that must be the user's own (user state, the
content index, the scan memo, a bearer token, the secrets file): the same read, plus named options
for the intended differences (who may own it, whether others may read it, how its folder is judged).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from typing import Literal

from .ownership import path_problem, unsafe_mode

#: the largest policy file read (tooldir.policy reads it; the scan memo hashes it without the policy model)
MAX_POLICY_BYTES = 1024 * 1024

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class Unreadable(Exception):
    """The file cannot be read as a small regular file; ``why`` says why in a phrase (for an OS
    error, ``os_error`` is true and ``why`` is the system's message: "Permission denied")."""

    def __init__(self, why: str, *, os_error: bool = False, problem: tuple[str, str] | None = None) -> None:
        super().__init__(why)
        self.why = why
        self.os_error = os_error
        #: an ownership refusal by :func:`read_private`: (the file or folder at fault, why), as
        #: :func:`tooldir._internal.ownership.path_problem` gives it
        self.problem = problem


def file_kind(mode: int) -> str:
    """What a file of ``mode`` is, as a phrase ("a FIFO", "a directory")."""
    kinds: tuple[tuple[Callable[[int], bool], str], ...] = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "not a file")


def read_small_file(
    path: str | os.PathLike[str],
    max_bytes: int,
    *,
    what: str = "the file",
    follow_links: bool = True,
    check: Callable[[os.stat_result], str | None] | None = None,
    dir_fd: int | None = None,
) -> bytes | None:
    """The bytes of the regular file at ``path`` (relative to ``dir_fd`` when given), or None when
    nothing is there.

    ``what`` names the kind of file in the size refusal ("a policy file is at most ..."); with
    ``follow_links=False`` a symbolic link is refused; ``check`` looks at the descriptor's fstat
    before anything is read and returns a refusal phrase, or None to go on (owner, mode).

    Raises:
        Unreadable: not a regular file, too large, refused by ``check``, or an OS error.
    """
    flags = _FLAGS if follow_links else _FLAGS | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if not follow_links and exc.errno == errno.ELOOP:
            raise Unreadable("it is a symbolic link") from None
        raise Unreadable(exc.strerror or str(exc), os_error=True) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Unreadable(f"it is {file_kind(info.st_mode)}, not a regular file")
        if info.st_size > max_bytes:
            raise Unreadable(f"it is {info.st_size} bytes; {what} is at most {max_bytes}")
        refusal = None if check is None else check(info)
        if refusal is not None:
            raise Unreadable(refusal)
        chunks: list[bytes] = []
        held = 0
        while chunk := os.read(fd, min(max_bytes + 1 - held, max(info.st_size + 1 - held, 1 << 16))):
            chunks.append(chunk)
            held += len(chunk)
            if held > max_bytes:  # it grew while being read
                raise Unreadable(f"it is over {max_bytes} bytes; {what} is at most {max_bytes}")
    except OSError as exc:
        raise Unreadable(exc.strerror or str(exc), os_error=True) from None
    finally:
        os.close(fd)
    return b"".join(chunks)


#: A folder :func:`path_problem` found safe, by path: its identity, owner and mode then. Only the
#: user or root can make a safe chain of folders unsafe; to put another folder in its place one must
#: write a folder of the chain, and the new folder (another inode) is walked again, as is one whose
#: owner or mode changed. (Not its ctime: every file written in the folder changes that.)
_safe_folders: dict[str, tuple[int, int, int, int, int]] = {}


def _folder_key(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_mode, st.st_uid, st.st_gid)


def read_private(
    path: str | os.PathLike[str],
    max_bytes: int,
    *,
    what: str = "the file",
    owner: Literal["user", "user-or-root"] = "user",
    secret: bool = False,
    folder: Literal["none", "owned", "trusted"] = "none",
) -> bytes | None:
    """The bytes of ``path``, a file nobody but the user (and root) could have changed, or None
    when nothing is there. Read as :func:`read_small_file` reads (no link followed, a regular file,
    at most ``max_bytes``), judged through the descriptor that is read. The named options:

    - ``owner``: ``"user"`` (the file is the user's and neither group nor others may write it: a
      file tooldir itself writes 0600) or ``"user-or-root"`` (the ownership rule of discovery,
      :func:`unsafe_mode`: group-writable only for the owner's private group).
    - ``secret``: group and others may not read it either (a token, the secrets file).
    - ``folder``: ``"none"``; ``"owned"`` (its folder is the user's, as ``owner="user"`` judges);
      ``"trusted"`` (its folder and every folder on the way, :func:`path_problem`; walked once per
      folder while that folder stays the same, and the file is then opened in that very folder).

    Raises:
        Unreadable: as :func:`read_small_file`; an ownership refusal carries ``problem``.
    """
    euid = os.geteuid()
    text = os.path.abspath(os.fspath(path))
    parent, name = os.path.split(text)
    try:
        dir_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Unreadable(exc.strerror or str(exc), os_error=True) from None
    try:
        _judge_folder(parent, os.fstat(dir_fd), folder, euid)

        def private(info: os.stat_result) -> str | None:
            mode = stat.S_IMODE(info.st_mode)
            exposed = f"its mode is {mode:04o}: group or others may read or write it; run chmod 600 {text}"
            if secret and info.st_uid == euid and mode & 0o077:  # the fix the user can make, first
                raise Unreadable(exposed, problem=(text, exposed))
            why = unsafe_mode(info, euid) if owner == "user-or-root" else _not_yours(info, euid)
            if why is not None:
                raise Unreadable(f"it is {why}", problem=(text, why))
            if secret and mode & 0o077:  # root's, and others may read it
                raise Unreadable(exposed, problem=(text, exposed))
            return None

        return read_small_file(name, max_bytes, what=what, follow_links=False, check=private, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


def _not_yours(st: os.stat_result, euid: int) -> str | None:
    """Why a file or folder is not the user's alone (owner ``"user"``: as tooldir writes its own)."""
    if st.st_uid != euid:
        return f"owned by uid {st.st_uid}, not by you (uid {euid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _judge_folder(parent: str, st: os.stat_result, folder: str, euid: int) -> None:
    if folder == "owned":
        why = _not_yours(st, euid)
        if why is not None:
            raise Unreadable(
                f"the folder {parent} is {why}: another user could replace the file", problem=(parent, why)
            )
    elif folder == "trusted" and _safe_folders.get(parent) != _folder_key(st):
        problem = path_problem(parent)
        if problem is not None:
            at, why = problem
            raise Unreadable(f"the folder {at} is {why}: another user could replace the file", problem=problem)
        try:
            walked = _folder_key(os.stat(parent))
        except OSError as exc:
            raise Unreadable(exc.strerror or str(exc), os_error=True) from None
        if walked != _folder_key(st):
            why = "replaced while it was checked"
            raise Unreadable(
                f"the folder {parent} was {why}: another user could replace the file", problem=(parent, why)
            )
        why = unsafe_mode(st, euid)
        if why is not None:
            raise Unreadable(
                f"the folder {parent} is {why}: another user could replace the file", problem=(parent, why)
            )
        if len(_safe_folders) > 256:
            _safe_folders.clear()
        _safe_folders[parent] = _folder_key(st)
