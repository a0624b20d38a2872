"""SnapshotStore: one-reference publish, ordered notification, bounded waits; Snapshot ids."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
from toolkit import make_tool
from watchkit import config_for

from tooldir.snapshot.loader import Loader
from tooldir.snapshot.store import Snapshot, SnapshotDiff, SnapshotStore


def two_snapshots(tmp_path: Path) -> tuple[Snapshot, Snapshot]:
    user = tmp_path / "user"
    make_tool(user, "alpha")
    loader = Loader(config_for(tmp_path, user=[user]))
    first = loader.load()
    make_tool(user, "beta")
    return first, loader.rebuild({str(user): {"beta"}}, generation=2)


def test_publish_swaps_in_the_next_generation_and_reports_the_diff(tmp_path: Path) -> None:
    first, second = two_snapshots(tmp_path)
    store = SnapshotStore(first)
    new, change = store.publish(second)
    assert store.current is new
    assert (new.id, new.generation) == (second.id, first.generation + 1)
    assert [t.name for t in change.added] == ["beta"]
    assert (change.old_generation, change.new_generation) == (1, 2)


def test_a_failing_subscriber_is_logged_and_the_others_still_get_the_diff(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = two_snapshots(tmp_path)
    store = SnapshotStore(first)
    got: list[int] = []

    def broken(snap: Snapshot, change: SnapshotDiff) -> None:
        raise ValueError("subscriber bug")

    store.subscribe(broken)
    store.subscribe(lambda snap, change: got.append(snap.generation))
    with caplog.at_level(logging.ERROR, logger="tooldir.snapshot"):
        store.publish(second)
    assert got == [2]
    assert "subscriber" in caplog.text


def test_publishing_from_inside_a_subscriber_is_refused(tmp_path: Path) -> None:
    first, second = two_snapshots(tmp_path)
    store = SnapshotStore(first)
    errors: list[BaseException] = []

    def republish(snap: Snapshot, change: SnapshotDiff) -> None:
        try:
            store.publish(second)
        except RuntimeError as exc:
            errors.append(exc)

    store.subscribe(republish)
    store.publish(second)
    assert len(errors) == 1
    assert store.current.generation == 2


def test_unsubscribed_functions_are_not_called(tmp_path: Path) -> None:
    first, second = two_snapshots(tmp_path)
    store = SnapshotStore(first)
    got: list[int] = []
    unsubscribe = store.subscribe(lambda snap, change: got.append(snap.generation))
    unsubscribe()
    store.publish(second)
    assert got == []


def test_wait_for_times_out_with_a_clear_error_and_wakes_on_publish(tmp_path: Path) -> None:
    first, second = two_snapshots(tmp_path)
    store = SnapshotStore(first)
    with pytest.raises(TimeoutError, match="generation 1"):
        store.wait_for_generation(2, timeout=0.05)
    publisher = threading.Timer(0.05, store.publish, args=(second,))
    publisher.start()
    try:
        assert store.wait_for_generation(2, timeout=10).id == second.id
    finally:
        publisher.join(10)


def test_snapshot_id_depends_on_content_not_on_generation_or_build_path(tmp_path: Path) -> None:
    first, second = two_snapshots(tmp_path)
    assert first.id != second.id
    cold = Loader(config_for(tmp_path, user=[tmp_path / "user"])).load(generation=7)
    assert cold.id == second.id
    assert cold.generation == 7
