"""A flat inotify observer: one inotify instance, one reader thread, non-recursive watches only.

watchdog's observers give every scheduled folder its own emitter thread, and its recursive mode
adds a watch on every folder below the one scheduled, however many there are: a project with
200k folders under a tool root took all of the user's inotify watches. The watcher instead
schedules exactly the folders discovery reads (see ``tooldir.snapshot.watch``), and needs that to cost one
watch per folder and nothing more. This class has the part of watchdog's observer interface the
watcher uses (``schedule`` / ``unschedule`` / ``start`` / ``stop`` / ``join``) and delivers
watchdog event objects to the handler's ``on_any_event``, so the watcher cannot tell them apart.

Linux only (``inotify(7)`` through libc). Kernel queue overflow calls the handler's
``on_overflow()`` when it has one.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import functools
import logging
import os
import select
import struct
import threading
from dataclasses import dataclass
from typing import Any

from watchdog.events import (
    DirAttribEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirModifiedEvent,
    DirMovedEvent,
    FileAttribEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
)

log = logging.getLogger("tooldir.watch")

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_EXCL_UNLINK = 0x04000000
IN_ISDIR = 0x40000000
IN_CLOEXEC = 0o2000000
IN_NONBLOCK = 0o4000

#: Changes only: never IN_OPEN / IN_ACCESS / IN_CLOSE_NOWRITE (the loader's own reads would flood
#: the queue).
WATCH_MASK = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
    | IN_DONT_FOLLOW
    | IN_EXCL_UNLINK
)
_HEADER = struct.Struct("iIII")
_READ_SIZE = 1 << 16


@functools.cache
def _lib() -> Any:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.inotify_init1.argtypes = [ctypes.c_int]
    libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    return libc


def _os_error(path: str | None = None) -> OSError:
    err = ctypes.get_errno()
    if err == errno.ENOSPC:
        return OSError(err, "inotify watch limit reached", path)
    if err == errno.EMFILE:
        return OSError(err, "inotify instance limit reached", path)
    return OSError(err, os.strerror(err), path)


@dataclass(frozen=True, eq=False, slots=True)
class FlatWatch:
    """A scheduled folder (the handle ``schedule`` returns)."""

    wd: int
    path: str
    handler: Any


class FlatInotifyObserver:
    """Watches folders, each non-recursively, through one inotify file descriptor."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._wake_r = self._wake_w = -1
        self._lock = threading.Lock()
        self._by_wd: dict[int, list[FlatWatch]] = {}
        self._thread: threading.Thread | None = None
        self._stopping = False

    @property
    def fd(self) -> int | None:
        """The inotify file descriptor (for tests that count its watches in /proc)."""
        return self._fd

    def start(self) -> None:
        fd = _lib().inotify_init1(IN_CLOEXEC | IN_NONBLOCK)
        if fd < 0:
            raise _os_error()
        self._fd = fd
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._thread = threading.Thread(target=self._run, name="tooldir-inotify", daemon=True)
        self._thread.start()

    def schedule(
        self, event_handler: Any, path: str, *, recursive: bool = False, event_filter: Any = None
    ) -> FlatWatch:
        """Watch the folder ``path`` itself (its entries and itself), never what is below it.

        Raises:
            ValueError: ``recursive=True`` (not offered: that is what this class exists to avoid).
            OSError: the folder cannot be watched (ENOSPC / EMFILE at the kernel's limits).
        """
        if recursive:
            raise ValueError("FlatInotifyObserver watches folders non-recursively only")
        if self._fd is None:
            raise OSError(errno.EBADF, "the observer is not started", path)
        wd = _lib().inotify_add_watch(self._fd, os.fsencode(path), WATCH_MASK)
        if wd < 0:
            raise _os_error(path)
        watch = FlatWatch(wd, path, event_handler)
        with self._lock:
            self._by_wd.setdefault(wd, []).append(watch)  # the same folder twice shares one wd
        return watch

    def unschedule(self, watch: FlatWatch) -> None:
        with self._lock:
            watches = self._by_wd.get(watch.wd)
            if watches is None or watch not in watches:
                return  # the kernel already dropped it (folder deleted)
            watches.remove(watch)
            if watches:
                return
            del self._by_wd[watch.wd]
        if self._fd is not None:
            _lib().inotify_rm_watch(self._fd, watch.wd)  # EINVAL when already gone: nothing to do

    def watch_count(self) -> int:
        with self._lock:
            return len(self._by_wd)

    def stop(self) -> None:
        self._stopping = True
        if self._wake_w >= 0:
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"x")

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                return
        for fd in (self._fd, self._wake_r, self._wake_w):
            if fd is not None and fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fd = None
        self._wake_r = self._wake_w = -1

    # -- the reader thread -----------------------------------------------------------------------

    def _run(self) -> None:
        assert self._fd is not None  # noqa: S101 - started
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while not self._stopping:
            try:
                ready = poller.poll()
            except InterruptedError:
                continue
            if self._stopping:
                return
            if not any(fd == self._fd for fd, _ in ready):
                continue
            try:
                data = os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                continue
            except OSError as exc:
                log.warning("inotify read failed: %s", exc)
                return
            for wd, mask, name in _parse(data):
                try:
                    self._deliver(wd, mask, name)
                except Exception:  # a failing handler must not end event delivery for everyone
                    log.exception("inotify event handler failed")

    def _deliver(self, wd: int, mask: int, name: bytes) -> None:
        if mask & IN_Q_OVERFLOW:
            log.warning("inotify queue overflowed; filesystem events were lost")
            with self._lock:
                handlers = {id(w.handler): w.handler for ws in self._by_wd.values() for w in ws}
            for handler in handlers.values():
                on_overflow = getattr(handler, "on_overflow", None)
                if callable(on_overflow):
                    on_overflow()
            return
        with self._lock:
            watches = list(self._by_wd.get(wd, ()))
            if mask & IN_IGNORED:
                self._by_wd.pop(wd, None)  # the folder is gone; its parent's watch reported it
        if not watches or mask & IN_IGNORED:
            return
        base = watches[-1].path  # the latest path this folder was scheduled under
        path = os.path.join(base, os.fsdecode(name)) if name else base
        event = _event(mask, path)
        if event is None:
            return
        for handler in {id(w.handler): w.handler for w in watches}.values():
            handler.on_any_event(event)


def _parse(data: bytes) -> list[tuple[int, int, bytes]]:
    events = []
    offset = 0
    while offset + _HEADER.size <= len(data):
        wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
        start = offset + _HEADER.size
        events.append((wd, mask, data[start : start + length].rstrip(b"\0")))
        offset = start + length
    return events


def _event(mask: int, path: str) -> FileSystemEvent | None:
    folder = bool(mask & IN_ISDIR)
    if mask & IN_CREATE:
        return DirCreatedEvent(path) if folder else FileCreatedEvent(path)
    if mask & IN_DELETE:
        return DirDeletedEvent(path) if folder else FileDeletedEvent(path)
    if mask & (IN_MOVED_FROM | IN_MOVED_TO):
        return DirMovedEvent(path, "") if folder else FileMovedEvent(path, "")
    if mask & (IN_DELETE_SELF | IN_MOVE_SELF):
        return DirDeletedEvent(path) if mask & IN_DELETE_SELF else DirMovedEvent(path, "")
    if mask & IN_MODIFY:
        return DirModifiedEvent(path) if folder else FileModifiedEvent(path)
    if mask & IN_CLOSE_WRITE:
        return FileClosedEvent(path)
    if mask & IN_ATTRIB:
        return DirAttribEvent(path) if folder else FileAttribEvent(path)
    return None


def inotify_watches() -> int:
    """Inotify watches this process holds, over all its inotify file descriptors."""
    total = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") != "anon_inode:inotify":
                continue
            with open(f"/proc/self/fdinfo/{fd}", encoding="ascii") as info:
                total += sum(1 for line in info if line.startswith("inotify wd:"))
        except OSError:
            continue  # closed meanwhile
    return total
