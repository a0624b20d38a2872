"""The flat inotify observer: one descriptor, non-recursive watches, watchdog event objects."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from watchdog.events import DirCreatedEvent, FileClosedEvent, FileCreatedEvent, FileSystemEvent

from tooldir._internal.inotify import IN_Q_OVERFLOW, FlatInotifyObserver

pytestmark = pytest.mark.serial  # inotify limits: never beside another such test


class Recorder:
    def __init__(self) -> None:
        self.events: list[FileSystemEvent] = []
        self.overflows = 0
        self.changed = threading.Condition()

    def on_any_event(self, event: FileSystemEvent) -> None:
        with self.changed:
            self.events.append(event)
            self.changed.notify_all()

    def on_overflow(self) -> None:
        self.overflows += 1

    def wait_for(self, predicate: Any, timeout: float = 10.0) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: predicate(self.events), timeout), self.events


@pytest.fixture
def observer() -> Any:
    obs = FlatInotifyObserver()
    obs.start()
    yield obs
    obs.stop()
    obs.join(5)


def test_a_watched_folder_reports_its_own_entries_but_nothing_below_them(observer: Any, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    seen = Recorder()
    observer.schedule(seen, str(tmp_path))
    (tmp_path / "sub" / "deep.txt").write_text("not reported: sub is not watched\n")
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "new").mkdir()
    seen.wait_for(lambda evs: any(isinstance(e, DirCreatedEvent) for e in evs))
    paths = {(type(e), e.src_path) for e in seen.events}
    assert (FileCreatedEvent, str(tmp_path / "file.txt")) in paths
    assert (FileClosedEvent, str(tmp_path / "file.txt")) in paths
    assert not any("deep.txt" in str(e.src_path) for e in seen.events)
    assert observer.watch_count() == 1


def test_unscheduling_the_last_handle_of_a_folder_removes_its_watch(observer: Any, tmp_path: Path) -> None:
    seen = Recorder()
    first = observer.schedule(seen, str(tmp_path))
    second = observer.schedule(seen, str(tmp_path))  # the same folder: one kernel watch
    assert observer.watch_count() == 1
    observer.unschedule(first)
    assert observer.watch_count() == 1
    observer.unschedule(second)
    observer.unschedule(second)  # twice: nothing to do
    assert observer.watch_count() == 0


def test_recursive_watches_are_refused_and_a_missing_folder_is_an_os_error(observer: Any, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="non-recursively"):
        observer.schedule(Recorder(), str(tmp_path), recursive=True)
    with pytest.raises(FileNotFoundError):
        observer.schedule(Recorder(), str(tmp_path / "nope"))


def test_a_queue_overflow_reaches_every_handler_once(observer: Any, tmp_path: Path) -> None:
    a, b = Recorder(), Recorder()
    (tmp_path / "x").mkdir()
    observer.schedule(a, str(tmp_path))
    observer.schedule(b, str(tmp_path / "x"))
    observer._deliver(-1, IN_Q_OVERFLOW, b"")
    assert (a.overflows, b.overflows) == (1, 1)
