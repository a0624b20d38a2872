"""Read one small configuration file whole, the way every file that decides something is read:
opened without blocking (a FIFO or a device is refused by its kind, never waited on or read until
memory runs out), only a regular file, at most ``max_bytes`` (checked before reading and again
while reading, in case it grows), looked at through the descriptor that is read (no gap between
the check and the read). Standard library only.

Each caller turns :class:`Unreadable` into its own error (PolicyError, SecretsFileError, ...);
its ``why`` is a phrase that fits after the file's name ("it is a FIFO, not a regular file").
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable

#: the largest policy file read (tooldir.policy reads it; the scan memo hashes it without the policy model)
MAX_POLICY_BYTES = 1024 * 1024

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class Unreadable(Exception):
    """The file cannot be read as a small regular file; ``why`` says why in a phrase (for an OS
    error, ``os_error`` is true and ``why`` is the system's message: "Permission denied")."""

    def __init__(self, why: str, *, os_error: bool = False) -> None:
        super().__init__(why)
        self.why = why
        self.os_error = os_error


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
) -> bytes | None:
    """The bytes of the regular file at ``path``, or None when nothing is there.

    ``what`` names the kind of file in the size refusal ("a policy file is at most ..."); with
    ``follow_links=False`` a symbolic link is refused; ``check`` looks at the descriptor's fstat
    before anything is read and returns a refusal phrase, or None to go on (owner, mode).

    Raises:
        Unreadable: not a regular file, too large, refused by ``check``, or an OS error.
    """
    flags = _FLAGS if follow_links else _FLAGS | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
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
        while chunk := os.read(fd, max_bytes + 1 - held):
            chunks.append(chunk)
            held += len(chunk)
            if held > max_bytes:  # it grew while being read
                raise Unreadable(f"it is over {max_bytes} bytes; {what} is at most {max_bytes}")
    except OSError as exc:
        raise Unreadable(exc.strerror or str(exc), os_error=True) from None
    finally:
        os.close(fd)
    return b"".join(chunks)
