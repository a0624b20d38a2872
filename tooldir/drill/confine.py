"""Keeping a drill inside its arena (drill:arena-escape): descriptor-relative file operations and
the rule for planted links.

A scenario is downloaded content. Every file operation of a plant or step goes through
:class:`Confined`: it walks from the arena's root one component at a time with ``O_NOFOLLOW``
(``openat`` / ``mkdirat`` / ``unlinkat`` / ``fchownat`` ...), so a symlink on the way is never
followed, and a symlink as the last component is acted on itself (removed, re-owned, replaced)
but never written, read, copied or chmodded through. And every link a scenario plants must lead
inside the arena (:func:`leads_to`, re-checked after every plant and step, since a later plant
can change where an earlier link leads): tooldir itself, run by the drill, finds the arena's
state, policy and tool roots by path, and must find them inside the arena too.

A plant or step that tries is an :class:`ArenaEscapeError`: a scenario error naming the plant or
step and the path, never a pass.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import socket
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from ..errors import ConfigError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
MAX_LINK_HOPS = 40
"""Links followed while resolving one path (the kernel's own bound): more is a loop, which
nothing can follow anywhere."""


class NotRunnableError(Exception):
    """The tooldir machinery a drill needs does not exist in this build (the drill fails)."""


class UnavailableError(Exception):
    """A system facility the drill needs is missing on this machine (root, namespaces, ...)."""


class ScenarioError(ConfigError):
    """A scenario is unusable (the drill author's mistake, exit code 2)."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path

    def diagnostics(self) -> str:
        return f"invalid scenario {self.path}: {self.message}"


class ArenaEscapeError(ScenarioError):
    """A plant or step would act outside its arena (through a symlink, on a link leading out, or
    with a path naming something outside). ``where`` names the plant or step (``steps[2] (write)``),
    ``target`` the path it named."""

    def __init__(self, message: str, *, path: str, where: str, target: str) -> None:
        super().__init__(f"{where}: {message}", path=path)
        self.where = where
        self.target = target


def inside(base: Path, path: Path) -> bool:
    return path == base or base in path.parents


def leads_to(start: Path, text: str) -> Path | None:
    """Where the path ``text`` leads from the folder ``start`` (absolute, no links in it),
    following symlinks as the kernel does; components that do not exist (yet) are taken as
    written. None: a link loop, which leads nowhere."""
    todo = list(PurePosixPath(text).parts)
    current = start
    if todo and todo[0] == "/":
        current, todo = Path("/"), todo[1:]
    hops = 0
    missing = False
    while todo:
        part = todo.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            current = current.parent
            continue
        step = current / part
        if not missing:
            try:
                st = os.lstat(step)
            except OSError:
                missing = True
            else:
                if stat.S_ISLNK(st.st_mode):
                    hops += 1
                    if hops > MAX_LINK_HOPS:
                        return None
                    target = PurePosixPath(os.readlink(step)).parts
                    if target and target[0] == "/":
                        current, target = Path("/"), target[1:]
                    todo = [*target, *todo]
                    continue
        current = step
    return current


class Confined:
    """File operations on absolute paths lexically inside ``base`` (as ``Arena.resolve`` makes
    them) that never leave it. ``where`` (``plant[0] (symlink)``) starts every refusal; ``links``
    is the arena's record of the links its scenario planted."""

    def __init__(self, base: Path, scenario: str, links: set[Path]) -> None:
        self.base = base
        self.scenario = scenario
        self.links = links

    # -- refusals -----------------------------------------------------------------------------

    def shown(self, path: Path) -> str:
        return str(path.relative_to(self.base)) if inside(self.base, path) else str(path)

    def escape(self, where: str, path: Path, why: str) -> ArenaEscapeError:
        return ArenaEscapeError(f"{self.shown(path)}: {why}", path=self.scenario, where=where, target=self.shown(path))

    def _through(self, where: str, path: Path, link: Path) -> ArenaEscapeError:
        return self.escape(
            where,
            path,
            f"{self.shown(link)} is a symlink; plants and steps act on the arena's own entries, never through a link",
        )

    def _parts(self, path: Path, where: str) -> tuple[str, ...]:
        if not inside(self.base, path) or ".." in path.parts:
            raise self.escape(where, path, "is outside the arena")
        return path.relative_to(self.base).parts

    # -- walking ------------------------------------------------------------------------------

    def _step_into(self, fd: int, name: str, *, where: str, path: Path, so_far: Path, create: bool, mode: int) -> int:
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            if not create:
                raise
            os.mkdir(name, mode, dir_fd=fd)  # the umask applies
            return os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR) and self._is_link(fd, name):
                raise self._through(where, path, so_far) from None
            raise

    @staticmethod
    def _is_link(fd: int, name: str) -> bool:
        try:
            return stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
        except OSError:
            return False

    @contextlib.contextmanager
    def folder(
        self, path: Path, where: str, *, create: bool = False, mode: int = 0o777, target: Path | None = None
    ) -> Iterator[int]:
        """A descriptor of the folder ``path`` (created with its parents, ``mode`` under the
        umask, when ``create``); ``target``: the path an error names (default ``path``)."""
        fd = os.open(self.base, _DIR_FLAGS)
        try:
            so_far = self.base
            for name in self._parts(path, where):
                so_far = so_far / name
                nxt = self._step_into(
                    fd, name, where=where, path=target or path, so_far=so_far, create=create, mode=mode
                )
                os.close(fd)
                fd = nxt
            yield fd
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def parent(self, path: Path, where: str, *, create: bool = False, mode: int = 0o777) -> Iterator[tuple[int, str]]:
        """(descriptor of the folder holding ``path``, its last component)."""
        if not self._parts(path, where):
            raise self.escape(where, path, "is the arena's root itself")
        with self.folder(path.parent, where, create=create, mode=mode, target=path) as fd:
            yield fd, path.name

    def lstat(self, path: Path, where: str) -> os.stat_result | None:
        """The entry itself (a link is not followed); None when it does not exist."""
        try:
            with self.parent(path, where) as (fd, name):
                return os.stat(name, dir_fd=fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _open_file(self, fd: int, name: str, flags: int, *, where: str, path: Path, verb: str) -> int:
        with contextlib.suppress(FileNotFoundError):
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if not stat.S_ISLNK(st.st_mode) and not stat.S_ISREG(st.st_mode):  # never open a FIFO or device
                raise ScenarioError(f"{where}: {self.shown(path)} is not a regular file", path=self.scenario)
        try:
            return os.open(name, flags, 0o666, dir_fd=fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP or (exc.errno == errno.ENXIO and self._is_link(fd, name)):
                raise self.escape(
                    where, path, f"is a symlink; {verb} through a planted link is refused (act on the link itself)"
                ) from None
            raise

    # -- operations ---------------------------------------------------------------------------

    def read(self, path: Path, where: str) -> bytes:
        with self.parent(path, where) as (fd, name):
            file_fd = self._open_file(fd, name, _READ_FLAGS, where=where, path=path, verb="reading")
            with os.fdopen(file_fd, "rb") as fh:
                if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                    raise ScenarioError(f"{where}: {self.shown(path)} is not a regular file", path=self.scenario)
                return fh.read()

    def write(
        self,
        path: Path,
        data: bytes,
        where: str,
        *,
        mode: int | None = None,
        keep_times: bool = False,
        dir_mode: int = 0o777,
    ) -> None:
        """Create or overwrite the regular file ``path`` (its folders are made, ``dir_mode``);
        ``mode`` is set after writing; ``keep_times`` gives it back its access and modification times."""
        with self.parent(path, where, create=True, mode=dir_mode) as (fd, name):
            file_fd = self._open_file(fd, name, _WRITE_FLAGS, where=where, path=path, verb="writing")
            with os.fdopen(file_fd, "wb") as fh:
                before = os.fstat(fh.fileno())
                if not stat.S_ISREG(before.st_mode):
                    raise ScenarioError(f"{where}: {self.shown(path)} is not a regular file", path=self.scenario)
                fh.truncate(0)
                fh.write(data)
                fh.flush()
                if mode is not None:
                    os.fchmod(fh.fileno(), mode)
                if keep_times:
                    os.utime(fh.fileno(), ns=(before.st_atime_ns, before.st_mtime_ns))

    def create_file(self, path: Path, where: str, *, size: int = 0, mode: int = 0o644) -> None:
        """A new (sparse) file of ``size`` bytes where nothing is."""
        with self.parent(path, where, create=True) as (fd, name):
            file_fd = os.open(name, _WRITE_FLAGS | os.O_EXCL, 0o600, dir_fd=fd)
            try:
                os.ftruncate(file_fd, size)
                os.fchmod(file_fd, mode)
            finally:
                os.close(file_fd)

    def makedirs(self, path: Path, where: str, *, mode: int = 0o777) -> None:
        with self.folder(path, where, create=True, mode=mode):
            pass

    def remove(self, path: Path, where: str) -> None:
        """Remove the entry itself: a folder with everything in it (links inside are removed,
        never followed), or a file or link."""
        with self.parent(path, where) as (fd, name):
            if stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                shutil.rmtree(name, dir_fd=fd)  # descriptor-based: it never follows a link
            else:
                os.unlink(name, dir_fd=fd)

    def clear(self, path: Path, where: str) -> None:
        """Make room for a new entry at ``path``: remove what is there, if anything."""
        with contextlib.suppress(FileNotFoundError):
            self.remove(path, where)

    def chmod(self, path: Path, mode: int, where: str) -> None:
        with self.parent(path, where) as (fd, name):
            entry = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            try:
                if stat.S_ISLNK(os.fstat(entry).st_mode):
                    raise self.escape(
                        where, path, "is a symlink; a mode would change its target (a link has no mode of its own)"
                    )
                os.chmod(f"/proc/self/fd/{entry}", mode)  # the very inode opened above, whatever it is
            finally:
                os.close(entry)

    def chown(self, path: Path, uid: int, gid: int, where: str) -> None:
        """Re-own the entry itself (a link's own owner, never its target's)."""
        with self.parent(path, where) as (fd, name):
            os.chown(name, uid, gid, dir_fd=fd, follow_symlinks=False)

    def symlink(self, path: Path, text: str, where: str) -> None:
        """Plant the link ``path -> text``; it must lead inside the arena, and so must every link
        planted before it, now that this one exists."""
        start = path.parent
        with self.folder(start, where, create=True):
            pass
        to = leads_to(start, text)
        if to is not None and not inside(self.base, to):
            raise self.escape(
                where,
                path,
                f"the link -> {text} leads out of the arena (to {to}); a planted link must point inside it "
                "(e.g. {outside}/...)",
            )
        with self.parent(path, where) as (fd, name):
            os.symlink(text, name, dir_fd=fd)
        self.links.add(path)
        self.check_links(where)

    def mkfifo(self, path: Path, where: str) -> None:
        with self.parent(path, where, create=True) as (fd, name):
            os.mkfifo(name, 0o644, dir_fd=fd)

    def mknod(self, path: Path, mode: int, device: int, where: str) -> None:
        with self.parent(path, where, create=True) as (fd, name):
            os.mknod(name, mode, device, dir_fd=fd)

    def bind_socket(self, path: Path, where: str) -> None:
        with self.parent(path, where, create=True) as (fd, name):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:  # relative to the folder's descriptor: AF_UNIX paths are limited to ~108 bytes
                sock.bind(f"/proc/self/fd/{fd}/{name}")
            finally:
                sock.close()

    def hardlink(self, path: Path, source: Path, where: str) -> None:
        """A second name for the regular file ``source`` (never for a link, never through one)."""
        with self.parent(source, where) as (src_fd, src_name):
            st = os.stat(src_name, dir_fd=src_fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                raise self.escape(where, source, "is a symlink; a hard link is made to a planted file, never a link")
            with self.parent(path, where, create=True) as (fd, name):
                os.link(src_name, name, src_dir_fd=src_fd, dst_dir_fd=fd, follow_symlinks=False)

    def utime(self, path: Path, ns: tuple[int, int], where: str) -> None:
        with self.parent(path, where) as (fd, name):
            os.utime(name, ns=ns, dir_fd=fd, follow_symlinks=False)

    def require_folder(self, path: Path, where: str) -> None:
        """``path`` is a folder of the arena itself, reached without a link."""
        with self.folder(path, where):
            pass

    def check_links(self, where: str) -> None:
        """Every link the scenario planted that is still there still leads inside the arena."""
        for link in sorted(self.links):
            try:
                with self.parent(link, where) as (fd, name):
                    if not stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                        raise FileNotFoundError(link)
                    text = os.readlink(name, dir_fd=fd)
            except (FileNotFoundError, NotADirectoryError, ArenaEscapeError):
                self.links.discard(link)  # removed, or its folder was: it is no longer in the arena
                continue
            to = leads_to(link.parent, text)
            if to is not None and not inside(self.base, to):
                raise self.escape(
                    where,
                    link,
                    f"the link -> {text} now leads out of the arena (to {to}); a planted link must point inside it",
                )
