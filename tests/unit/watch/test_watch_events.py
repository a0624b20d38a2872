"""The watcher on real inotify (tooldir's flat observer) on temporary directories: integration tests;
every wait is bounded and waits on a condition. test_watch_scripted.py drives it event by event."""

from __future__ import annotations

import errno
import itertools
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from toolkit import approve, make_tool, project_tools
from watchkit import WAIT_S, check_consistent, config_for, settles_to_cold_load, watching

from tooldir.model import Source, Status
from tooldir.policy import Policy
from tooldir.snapshot.loader import Loader
from tooldir.snapshot.store import SnapshotDiff, SnapshotStore
from tooldir.snapshot.watch import Watcher, default_observer
from tooldir.state import APPROVALS


def test_a_new_package_is_published_with_an_added_diff(tmp_path: Path) -> None:
    user = tmp_path / "user"
    make_tool(user, "alpha")
    config = config_for(tmp_path, user=[user])
    diffs: list[SnapshotDiff] = []
    with watching(config) as (watcher, problems):
        watcher.subscribe(lambda snap, change: diffs.append(change))
        make_tool(user, "beta")
        snap = watcher.wait_for(lambda s: "beta" in s.by_name, WAIT_S)
        assert snap.by_name["beta"].status is Status.ACTIVE
        settles_to_cold_load(watcher, config)
    assert any([t.name for t in d.added] == ["beta"] for d in diffs)
    assert problems == []


def test_an_edited_file_changes_the_digest_and_the_diff_says_so(tmp_path: Path) -> None:
    user = tmp_path / "user"
    make_tool(user, "alpha")
    config = config_for(tmp_path, user=[user])
    diffs: list[SnapshotDiff] = []
    with watching(config) as (watcher, _):
        before = watcher.store.current.by_name["alpha"].digest
        watcher.subscribe(lambda snap, change: diffs.append(change))
        (user / "alpha" / "run.py").write_text("print('v2')\n")
        snap = watcher.wait_for(lambda s: s.by_name["alpha"].digest != before, WAIT_S)
        settles_to_cold_load(watcher, config)
    assert snap.by_name["alpha"].digest != before
    changed = [(o.digest, n.digest) for d in diffs for o, n in d.changed]
    assert changed[0][0] == before


def test_a_renamed_package_folder_removes_the_old_entry_and_adds_the_new(tmp_path: Path) -> None:
    user = tmp_path / "user"
    make_tool(user, "alpha")
    config = config_for(tmp_path, user=[user])
    with watching(config) as (watcher, _):
        (user / "alpha").rename(user / "omega")
        snap = watcher.wait_for(lambda s: not s.records("alpha"), WAIT_S)
        settles_to_cold_load(watcher, config)
    # the manifest still says "alpha": the renamed folder is rejected, never loaded under either name
    assert snap.by_name == {}
    assert any(d.code == "name-mismatch" for d in snap.diagnostics)


def test_deleting_a_package_brings_back_the_tool_it_shadowed(tmp_path: Path) -> None:
    user, project = tmp_path / "user", tmp_path / "proj"
    make_tool(user, "alpha")
    proot = project_tools(project)
    make_tool(proot, "alpha")
    config = config_for(tmp_path, project=project, user=[user])
    with watching(config) as (watcher, _):
        assert watcher.store.current.by_name["alpha"].source is Source.PROJECT
        shutil.rmtree(proot / "alpha")
        snap = watcher.wait_for(lambda s: s.by_name["alpha"].source is Source.USER, WAIT_S)
        settles_to_cold_load(watcher, config)
    assert snap.by_name["alpha"].status is Status.ACTIVE


def test_a_package_replaced_by_a_symlink_is_refused_and_nothing_outside_is_read(tmp_path: Path) -> None:
    user, outside = tmp_path / "user", tmp_path / "outside"
    make_tool(user, "alpha")
    make_tool(outside, "alpha", description="Outside the root: must never load.")
    config = config_for(tmp_path, user=[user])
    with watching(config) as (watcher, _):
        shutil.rmtree(user / "alpha")
        (user / "alpha").symlink_to(outside / "alpha")
        snap = watcher.wait_for(lambda s: any(d.code == "symlink" for d in s.diagnostics), WAIT_S)
        settles_to_cold_load(watcher, config)
    assert snap.tools == ()
    assert not any("outside" in str(t.path) for t in snap.tools)


def test_a_deleted_and_recreated_root_is_noticed_both_times(tmp_path: Path) -> None:
    user = tmp_path / "user"
    make_tool(user, "alpha")
    config = config_for(tmp_path, user=[user])
    with watching(config) as (watcher, _):
        shutil.rmtree(user)
        watcher.wait_for(lambda s: not s.tools, WAIT_S)
        make_tool(user, "beta")
        (user / "beta" / "run.py").write_text("print('written after the root came back')\n")
        snap = settles_to_cold_load(watcher, config)
        assert list(snap.by_name) == ["beta"]
        # the new root is watched too
        make_tool(user, "gamma")
        watcher.wait_for(lambda s: "gamma" in s.by_name, WAIT_S)


def test_a_project_root_replaced_by_a_symlink_is_refused(tmp_path: Path) -> None:
    project, elsewhere = tmp_path / "proj", tmp_path / "elsewhere"
    proot = project_tools(project)
    make_tool(proot, "alpha")
    make_tool(elsewhere, "alpha")
    config = config_for(tmp_path, project=project)
    with watching(config) as (watcher, _):
        shutil.rmtree(project / ".tooldir")
        (project / ".tooldir").symlink_to(elsewhere, target_is_directory=True)
        snap = watcher.wait_for(lambda s: any(d.code == "symlink" for d in s.diagnostics), WAIT_S)
        settles_to_cold_load(watcher, config)
    assert snap.tools == ()


def test_an_approval_flips_pending_to_active_without_a_restart(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    folder = make_tool(project_tools(project), "alpha")
    config = config_for(tmp_path, project=project)
    diffs: list[SnapshotDiff] = []
    with watching(config) as (watcher, _):
        assert watcher.store.current.by_name["alpha"].status is Status.PENDING
        watcher.subscribe(lambda snap, change: diffs.append(change))
        approve(config.state_dir, folder)  # the state folder did not exist when watching started
        watcher.wait_for(lambda s: s.by_name["alpha"].status is Status.ACTIVE, WAIT_S)
    flips = [(str(o.status), str(n.status)) for d in diffs for o, n in d.status_changed]
    assert flips == [("pending", "active")]


def test_a_failed_build_keeps_the_last_good_snapshot_and_is_reported(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    folder = make_tool(project_tools(project), "alpha")
    config = config_for(tmp_path, project=project)
    config.state_dir.mkdir()
    with watching(config, retry_s=0.05) as (watcher, problems):
        good = watcher.store.current
        (config.state_dir / APPROVALS).write_text("{torn")
        (folder / "run.py").write_text("print('edited')\n")
        problems.wait_until(lambda ps: any(p.code == "build-failed" for p in ps))
        assert watcher.store.current is good  # nothing half-built was published
        assert watcher.status().failures >= 1
        approve(config.state_dir, folder)
        snap = watcher.wait_for(lambda s: s.by_name["alpha"].status is Status.ACTIVE, WAIT_S)
        settles_to_cold_load(watcher, config)
    assert snap.generation > good.generation
    assert "approvals.json" in problems[0].message


def test_policy_file_changes_are_applied_and_a_broken_policy_is_reported(tmp_path: Path) -> None:
    user = tmp_path / "user"
    make_tool(user, "alpha", risk="exec")
    policy = tmp_path / "policy.toml"
    policy.write_text('[sources.user]\nmax_risk = "exec"\n')
    config = config_for(tmp_path, user=[user])
    with watching(config, policy_file=policy) as (watcher, problems):
        policy.write_text('[sources.user]\nmax_risk = "read"\n')
        snap = watcher.wait_for(lambda s: s.records("alpha")[0].status is Status.REJECTED, WAIT_S)
        assert any(d.code == "risk-not-allowed" for d in snap.diagnostics)
        policy.write_text("[sources.user\n")
        problems.wait_until(lambda ps: any(p.code == "policy-invalid" for p in ps))
        assert watcher.store.current.id == snap.id


def test_a_reloaded_policy_is_handed_to_on_policy_so_enforcement_follows_the_file(tmp_path: Path) -> None:
    # a long-running host (tooldir serve) passes Registry.update_policy here: a deny rule the user
    # adds while it runs must apply without a restart, even though no tool's status changes
    user = tmp_path / "user"
    make_tool(user, "alpha")
    policy = tmp_path / "policy.toml"
    policy.write_text("[permissions]\ndeny = []\n")
    config = config_for(tmp_path, user=[user])
    received: list[Policy] = []
    got = threading.Event()

    def on_policy(p: Policy) -> None:
        received.append(p)
        got.set()

    with watching(config, policy_file=policy, on_policy=on_policy):
        policy.write_text('[permissions]\ndeny = ["alpha"]\n')
        assert got.wait(WAIT_S)
    assert received[-1].permissions.deny == ("alpha",)


def test_running_out_of_inotify_watches_falls_back_to_periodic_rescans(tmp_path: Path) -> None:
    user = tmp_path / "user"
    make_tool(user, "alpha")
    config = config_for(tmp_path, user=[user])

    class Exhausted:
        """A real observer whose kernel has no inotify watches left."""

        def __init__(self) -> None:
            self.inner = default_observer()

        def schedule(self, handler: Any, path: str, *, recursive: bool = False, event_filter: Any = None) -> Any:
            raise OSError(errno.ENOSPC, "inotify watch limit reached")

        def unschedule(self, watch: Any) -> None:
            self.inner.unschedule(watch)

        def start(self) -> None:
            self.inner.start()

        def stop(self) -> None:
            self.inner.stop()

        def join(self, timeout: float | None = None) -> None:
            self.inner.join(timeout)

    with watching(config, observer_factory=Exhausted, rescan_interval_s=0.2) as (watcher, problems):
        assert watcher.status().mode == "degraded"
        assert problems[0].code == "inotify-limit"
        assert "max_user_watches" in problems[0].message
        make_tool(user, "beta")
        watcher.wait_for(lambda s: "beta" in s.by_name, WAIT_S)
        settles_to_cold_load(watcher, config)


def test_subscribers_receive_every_diff_in_generation_order(tmp_path: Path) -> None:
    user = tmp_path / "user"
    config = config_for(tmp_path, user=[user])
    user.mkdir()
    seen: list[tuple[int, int]] = []
    with watching(config) as (watcher, _):
        watcher.subscribe(lambda snap, change: seen.append((change.old_generation, snap.generation)))
        for i in range(8):
            make_tool(user, f"tool_{i}")
            watcher.wait_for(lambda s, i=i: f"tool_{i}" in s.by_name, WAIT_S)
    assert seen, "nothing published"
    assert [new for _, new in seen] == sorted({new for _, new in seen})
    assert all(old + 1 == new for old, new in seen)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(seen))


def test_watcher_stops_cleanly_and_reports_stopped(tmp_path: Path) -> None:
    user = tmp_path / "user"
    make_tool(user, "alpha")
    loader = Loader(config_for(tmp_path, user=[user]))
    store = SnapshotStore(loader.load())
    watcher = Watcher(loader, store)
    watcher.start()
    assert watcher.status().mode == "inotify"
    assert watcher.status().watches >= 2  # the root and its parent
    watcher.stop()
    watcher.stop()
    assert watcher.status().mode == "stopped"
    with pytest.raises(RuntimeError):
        watcher.start()
    check_consistent(store.current)


class _Deaf:
    """An observer that accepts watches but never reports an event (as after lost events)."""

    def schedule(self, handler: Any, path: str, *, recursive: bool = False, event_filter: Any = None) -> Any:
        return (path, recursive)

    def unschedule(self, watch: Any) -> None:
        pass

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def join(self, timeout: float | None = None) -> None:
        pass


def test_a_project_root_that_appears_later_is_picked_up(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    config = config_for(tmp_path, project=project)
    with watching(config) as (watcher, _):
        assert watcher.store.current.tools == ()
        make_tool(project_tools(project), "alpha")  # creates .tooldir/tools/alpha in one go
        snap = watcher.wait_for(lambda s: "alpha" in s.by_name, WAIT_S)
        settles_to_cold_load(watcher, config)
        make_tool(project / ".tooldir" / "tools", "beta")  # and the new root is watched
        watcher.wait_for(lambda s: "beta" in s.by_name, WAIT_S)
    assert snap.by_name["alpha"].status is Status.PENDING


def test_a_root_made_world_writable_is_refused_until_its_mode_is_fixed(tmp_path: Path) -> None:
    user = tmp_path / "user"
    make_tool(user, "alpha")
    config = config_for(tmp_path, user=[user])
    with watching(config) as (watcher, _):
        user.chmod(0o777)  # only a metadata change: no file is created, deleted or written
        snap = watcher.wait_for(lambda s: any(d.code == "unsafe-permissions" for d in s.diagnostics), WAIT_S)
        assert snap.tools == ()
        user.chmod(0o755)
        watcher.wait_for(lambda s: "alpha" in s.by_name, WAIT_S)
        settles_to_cold_load(watcher, config)


def test_trust_is_rechecked_periodically_even_without_events(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    folder = make_tool(project_tools(project), "alpha")
    config = config_for(tmp_path, project=project)
    with watching(config, observer_factory=_Deaf, rescan_on_start=False, trust_interval_s=0.2) as (watcher, _):
        assert watcher.store.current.by_name["alpha"].status is Status.PENDING
        approve(config.state_dir, folder)  # no observer will report it
        watcher.wait_for(lambda s: s.by_name["alpha"].status is Status.ACTIVE, WAIT_S)


class HeldBuild:
    """Holds the watcher's worker in its next build until ``release`` is set (so the events made
    meanwhile reach it in one batch, as under load), and records every event the watcher handles.
    Patch ``Watcher._on_event`` with :meth:`on_event` and ``Loader.rebuild`` with :meth:`rebuild`."""

    _real_event = Watcher._on_event
    _real_rebuild = Loader.rebuild

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self._seen: list[tuple[str, str]] = []
        self._noticed = threading.Condition()

    @property
    def on_event(self) -> Any:
        held = self

        def on_event(watcher: Watcher, event: Any) -> None:
            HeldBuild._real_event(watcher, event)
            with held._noticed:
                held._seen.append((event.event_type, str(event.src_path)))
                held._noticed.notify_all()

        return on_event

    @property
    def rebuild(self) -> Any:
        held = self

        def rebuild(loader: Loader, *args: Any, **kwargs: Any) -> Any:
            if not held.release.is_set():
                held.entered.set()
                assert held.release.wait(WAIT_S), "the test never released the build"
            return HeldBuild._real_rebuild(loader, *args, **kwargs)

        return rebuild

    def wait_for_event(self, kind: str, path: Path) -> None:
        with self._noticed:
            assert self._noticed.wait_for(lambda: (kind, str(path)) in self._seen, WAIT_S), self._seen


def test_a_package_folder_deleted_and_made_again_while_a_build_runs_is_watched_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The storm's lost reload (issue 22): the kernel drops a folder's watch when the folder is
    deleted, and a folder made again at once often gets the same inode number (ext4 reuses it), so
    the same (st_dev, st_ino) must not keep the dead watch. The worker is held in a build while the
    package is deleted and made again, so both events reach it in one batch, as under load."""
    user = tmp_path / "user"
    make_tool(user, "alpha")
    make_tool(user, "beta")
    config = config_for(tmp_path, user=[user])
    held = HeldBuild()
    entered, release = held.entered, held.release

    monkeypatch.setattr(Watcher, "_on_event", held.on_event)
    with watching(config, rescan_on_start=False) as (watcher, _):
        first = watcher.store.current.by_name["alpha"].digest
        monkeypatch.setattr(Loader, "rebuild", held.rebuild)
        (user / "beta" / "run.py").write_text("print('beta v2')\n")
        assert entered.wait(WAIT_S), "no build started for beta"
        shutil.rmtree(user / "alpha")
        make_tool(user, "alpha", script="print('alpha, made again')\n")
        held.wait_for_event("created", user / "alpha")
        release.set()
        snap = watcher.wait_for(lambda s: s.by_name["alpha"].digest != first, WAIT_S)
        (user / "alpha" / "run.py").write_text("print('alpha, edited after')\n")
        watcher.wait_for(lambda s: s.by_name["alpha"].digest != snap.by_name["alpha"].digest, WAIT_S)
        settles_to_cold_load(watcher, config)


def test_a_package_made_while_a_new_root_is_listed_before_its_watch_exists_is_watched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A root made again is listed and then watched: a package made in between sends no event
    (nothing watches the root yet) and, unless the root is listed again, is never watched. The
    worker is held in a build while the root is deleted and made again, so one re-arm sees both."""
    user = tmp_path / "user"
    make_tool(user, "alpha")
    config = config_for(tmp_path, user=[user])
    held = HeldBuild()
    entered, release = held.entered, held.release

    planted = threading.Event()
    real_contents = Watcher._root_contents

    def contents_then_plant(self: Watcher, want: dict[tuple[str, bool], tuple[int, int]]) -> Any:
        partial = real_contents(self, want)
        if release.is_set() and not planted.is_set() and (str(user), False) in want:
            make_tool(user, "late")  # after the listing, before the root's watch
            planted.set()
        return partial

    monkeypatch.setattr(Watcher, "_on_event", held.on_event)
    with watching(config, rescan_on_start=False) as (watcher, _):
        monkeypatch.setattr(Loader, "rebuild", held.rebuild)
        monkeypatch.setattr(Watcher, "_root_contents", contents_then_plant)
        (user / "alpha" / "run.py").write_text("print('alpha v2')\n")
        assert entered.wait(WAIT_S), "no build started for alpha"
        shutil.rmtree(user)
        make_tool(user, "alpha")
        held.wait_for_event("created", user)
        release.set()
        snap = watcher.wait_for(lambda s: "late" in s.by_name, WAIT_S)
        assert planted.is_set()
        (user / "late" / "run.py").write_text("print('late, edited')\n")
        watcher.wait_for(lambda s: s.by_name["late"].digest != snap.by_name["late"].digest, WAIT_S)
        settles_to_cold_load(watcher, config)
