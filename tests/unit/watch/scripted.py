"""A scripted observer for watcher tests: it records what the watcher schedules and delivers
exactly the events a test tells it to, on the test's thread, so no test depends on when the
kernel's inotify reports a change."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileSystemEvent,
)


class ScriptedObserver:
    """Implements :class:`tooldir.snapshot.watch.Observer`; the test drives it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watches: dict[int, tuple[Any, str]] = {}
        self._next = 0
        self.started = threading.Event()
        self.stopped = threading.Event()

    # -- the Observer protocol ---------------------------------------------------------------

    def schedule(self, event_handler: Any, path: str, *, recursive: bool = False, event_filter: Any = None) -> Any:
        if recursive:
            raise ValueError("the watcher only schedules non-recursive watches")
        if not os.path.isdir(path):
            raise FileNotFoundError(path)
        with self._lock:
            self._next += 1
            self._watches[self._next] = (event_handler, path)
            return self._next

    def unschedule(self, watch: Any) -> None:
        with self._lock:
            self._watches.pop(watch, None)

    def start(self) -> None:
        self.started.set()

    def stop(self) -> None:
        self.stopped.set()

    def join(self, timeout: float | None = None) -> None:
        pass

    # -- the script --------------------------------------------------------------------------

    def watched(self) -> set[str]:
        with self._lock:
            return {path for _handler, path in self._watches.values()}

    def deliver(self, event: FileSystemEvent) -> None:
        """Deliver ``event`` to every handler watching the folder it happened in (as inotify
        would: a folder's watch reports its own entries)."""
        path = os.fsdecode(event.src_path)
        with self._lock:
            handlers = {id(h): h for h, folder in self._watches.values() if folder in (path, os.path.dirname(path))}
        assert handlers, f"no watch covers {path}: {sorted(self.watched())}"
        for handler in handlers.values():
            handler.on_any_event(event)

    def created(self, path: Path) -> None:
        """``path`` appeared (a folder made in one go, e.g. a whole package)."""
        self.deliver(DirCreatedEvent(str(path)) if path.is_dir() else FileCreatedEvent(str(path)))

    def written(self, path: Path) -> None:
        self.deliver(FileModifiedEvent(str(path)))
        self.deliver(FileClosedEvent(str(path)))

    def deleted(self, path: Path, *, folder: bool = True) -> None:
        """``path`` was deleted; a folder's watches (at or below it) end, as the kernel's do, even
        when a folder made again there gets the same inode number."""
        self.deliver(DirDeletedEvent(str(path)) if folder else FileDeletedEvent(str(path)))
        if folder:
            self.dropped(path)

    def dropped(self, path: Path) -> None:
        """The watches at or below the folder ``path`` end without an event (deleted while the
        kernel queue overflowed)."""
        top = str(path)
        with self._lock:
            for wd, (_handler, folder) in list(self._watches.items()):
                if folder == top or folder.startswith(top + os.sep):
                    del self._watches[wd]

    def overflow(self) -> None:
        """The kernel dropped events: every handler hears it once."""
        with self._lock:
            handlers = {id(h): h for h, _folder in self._watches.values()}
        for handler in handlers.values():
            handler.on_overflow()
