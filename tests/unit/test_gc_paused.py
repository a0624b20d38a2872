"""``tooldir.gc_paused``: the GC tuning a host opts in to; tooldir's library code never applies it."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

import tooldir
import tooldir.deferred.search
import tooldir.snapshot.loader


def test_gc_paused_disables_the_collector_inside_and_restores_it_after() -> None:
    assert gc.isenabled()
    with tooldir.gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_gc_paused_restores_the_collector_when_the_block_raises() -> None:
    with pytest.raises(RuntimeError), tooldir.gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_gc_paused_leaves_a_host_that_disabled_the_collector_disabled() -> None:
    gc.disable()
    try:
        with tooldir.gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_library_load_and_search_index_never_touch_the_hosts_collector(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolkit import make_tool

    make_tool(root, "some_tool")
    touched: list[str] = []
    for name in ("disable", "freeze", "unfreeze", "set_threshold"):
        monkeypatch.setattr(gc, name, lambda *a, _n=name: touched.append(_n))
    loader = tooldir.snapshot.loader.Loader(
        tooldir.make_config(project=None, user_dirs=[root], state_dir=tmp_path / "state")
    )
    snapshot = loader.load()
    tooldir.deferred.search.SearchIndex.from_snapshot(snapshot)
    assert [t.name for t in snapshot.tools] == ["some_tool"]
    assert touched == []
