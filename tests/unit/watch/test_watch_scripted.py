"""The watcher driven by a scripted observer: each test delivers exactly the events it names, so
what is proven is the watcher's reaction to an event, never the kernel's timing. (The tests in
test_watch_events.py run the same watcher on real inotify.)"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from scripted import ScriptedObserver
from toolkit import approve, make_tool, project_tools
from watchkit import WAIT_S, config_for, settles_to_cold_load, watching

from tooldir.model import Status
from tooldir.policy import Policy
from tooldir.state import APPROVALS

NOTHING_S = 0.3  # how long a test waits to see that nothing is published


def test_the_watcher_schedules_the_root_its_parents_and_every_package_folder(tmp_path: Path) -> None:
    user = tmp_path / "user"
    make_tool(user, "alpha")
    observer = ScriptedObserver()
    with watching(config_for(tmp_path, user=[user]), observer_factory=lambda: observer, rescan_on_start=False):
        assert observer.started.is_set()
        assert {str(tmp_path), str(user), str(user / "alpha")} <= observer.watched()
    assert observer.stopped.is_set()


def test_a_package_created_on_disk_is_published_only_once_its_event_arrives(tmp_path: Path) -> None:
    user = tmp_path / "user"
    make_tool(user, "alpha")
    config = config_for(tmp_path, user=[user])
    observer = ScriptedObserver()
    with watching(config, observer_factory=lambda: observer, rescan_on_start=False) as (watcher, problems):
        folder = make_tool(user, "beta")
        with pytest.raises(TimeoutError):
            watcher.wait_for(lambda s: "beta" in s.by_name, NOTHING_S)
        observer.created(folder)
        snap = watcher.wait_for(lambda s: "beta" in s.by_name, WAIT_S)
        assert snap.by_name["beta"].status is Status.ACTIVE
        settles_to_cold_load(watcher, config)
    assert problems == []


def test_a_written_file_event_rereads_that_package_and_changes_its_digest(tmp_path: Path) -> None:
    user = tmp_path / "user"
    folder = make_tool(user, "alpha")
    config = config_for(tmp_path, user=[user])
    observer = ScriptedObserver()
    with watching(config, observer_factory=lambda: observer, rescan_on_start=False) as (watcher, _):
        before = watcher.store.current.by_name["alpha"].digest
        (folder / "run.py").write_text("print('v2')\n")
        observer.written(folder / "run.py")
        snap = watcher.wait_for(lambda s: s.by_name["alpha"].digest != before, WAIT_S)
        settles_to_cold_load(watcher, config)
    assert snap.generation == 2


def test_an_approval_event_in_the_state_folder_flips_pending_to_active(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    folder = make_tool(project_tools(project), "alpha")
    config = config_for(tmp_path, project=project)
    (config.state_dir).mkdir(parents=True, exist_ok=True)
    observer = ScriptedObserver()
    with watching(config, observer_factory=lambda: observer, rescan_on_start=False) as (watcher, _):
        assert watcher.store.current.by_name["alpha"].status is Status.PENDING
        approve(config.state_dir, folder)
        observer.written(config.state_dir / APPROVALS)
        watcher.wait_for(lambda s: s.by_name["alpha"].status is Status.ACTIVE, WAIT_S)


def test_a_lost_events_signal_from_the_observer_triggers_a_full_rescan(tmp_path: Path) -> None:
    user = tmp_path / "user"
    make_tool(user, "alpha")
    config = config_for(tmp_path, user=[user])
    observer = ScriptedObserver()
    with watching(config, observer_factory=lambda: observer, rescan_on_start=False) as (watcher, problems):
        make_tool(user, "beta")  # no event will ever say so
        with pytest.raises(TimeoutError):
            watcher.wait_for(lambda s: "beta" in s.by_name, NOTHING_S)
        observer.overflow()
        watcher.wait_for(lambda s: "beta" in s.by_name, WAIT_S)
        settles_to_cold_load(watcher, config)
    assert [p.code for p in problems] == ["inotify-overflow"]


def test_a_policy_file_event_hands_the_reloaded_policy_to_on_policy(tmp_path: Path) -> None:
    user = tmp_path / "user"
    make_tool(user, "alpha")
    policy = tmp_path / "policy.toml"
    policy.write_text("")
    received: list[Policy] = []
    got = threading.Event()

    def on_policy(p: Policy) -> None:
        received.append(p)
        got.set()

    observer = ScriptedObserver()
    with watching(
        config_for(tmp_path, user=[user]),
        observer_factory=lambda: observer,
        rescan_on_start=False,
        policy_file=policy,
        on_policy=on_policy,
    ):
        policy.write_text('[permissions]\ndeny = ["alpha"]\n')
        observer.written(policy)
        assert got.wait(WAIT_S)
    assert received[-1].permissions.deny == ("alpha",)


def test_a_package_folder_reported_deleted_is_watched_anew_though_the_folder_there_has_the_same_identity(
    tmp_path: Path,
) -> None:
    """A folder deleted and made again at once often has the same inode number (ext4): on disk
    here it is the very same folder, with new contents; the deletion ended its watch."""
    user = tmp_path / "user"
    folder = make_tool(user, "alpha")
    config = config_for(tmp_path, user=[user])
    observer = ScriptedObserver()
    with watching(config, observer_factory=lambda: observer, rescan_on_start=False) as (watcher, _):
        before = watcher.store.current.by_name["alpha"].digest
        (folder / "run.py").write_text("print('made again')\n")
        observer.deleted(folder)
        snap = watcher.wait_for(lambda s: s.by_name["alpha"].digest != before, WAIT_S)
        assert str(folder) in observer.watched()
        (folder / "run.py").write_text("print('edited afterwards')\n")
        observer.written(folder / "run.py")
        watcher.wait_for(lambda s: s.by_name["alpha"].digest != snap.by_name["alpha"].digest, WAIT_S)
        settles_to_cold_load(watcher, config)


def test_after_lost_events_every_folder_is_watched_anew(tmp_path: Path) -> None:
    """The lost events may have been a package's deletion and its folder made again with the same
    inode number: the rescan after an overflow renews every watch, not only the missing ones."""
    user = tmp_path / "user"
    folder = make_tool(user, "alpha")
    config = config_for(tmp_path, user=[user])
    observer = ScriptedObserver()
    with watching(config, observer_factory=lambda: observer, rescan_on_start=False) as (watcher, problems):
        before = watcher.store.current.by_name["alpha"].digest
        (folder / "run.py").write_text("print('made again')\n")
        observer.dropped(folder)
        observer.overflow()
        snap = watcher.wait_for(lambda s: s.by_name["alpha"].digest != before, WAIT_S)
        assert {str(tmp_path), str(user), str(folder)} <= observer.watched()
        (folder / "run.py").write_text("print('edited afterwards')\n")
        observer.written(folder / "run.py")
        watcher.wait_for(lambda s: s.by_name["alpha"].digest != snap.by_name["alpha"].digest, WAIT_S)
    assert [p.code for p in problems] == ["inotify-overflow"]
