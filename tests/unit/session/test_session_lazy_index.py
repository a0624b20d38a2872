"""The search index is built on the first search, not when a session starts (issue 14: a
session's first listing, ``tooldir serve``'s first ``tools/list``, never waits for it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sesskit import defer_policy
from toolkit import make_tool

from tooldir.deferred import search
from tooldir.deferred.session import Session
from tooldir.deferred.tokens import TokenCounter
from tooldir.snapshot.loader import Loader, make_config
from tooldir.snapshot.store import SnapshotStore


@pytest.mark.both_rankers
def test_a_session_lists_its_working_set_without_building_the_index_and_the_first_search_builds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = tmp_path / "user"
    make_tool(user, "alpha_tool", description="Convert currency amounts.")
    loader = Loader(make_config(project=tmp_path, user_dirs=[user], state_dir=tmp_path / "s"))
    store = SnapshotStore(loader.load())
    builds: list[int] = []
    build = search.SearchIndex.from_snapshot  # bound to the class

    def counted(*args: Any, **kwargs: Any) -> search.SearchIndex:
        builds.append(1)
        return build(*args, **kwargs)

    monkeypatch.setattr(search.SearchIndex, "from_snapshot", staticmethod(counted))
    session = Session(store, policy=defer_policy(), counter=TokenCounter(prefer_exact=False))
    assert session.working_set()  # the first listing (the guard tools at least)
    assert builds == []
    make_tool(user, "bravo_tool", description="Read the weather report.")
    store.publish(loader.load())  # followed without an index: nothing to update
    assert builds == []
    result = session.tool_search(queries=["weather"])
    assert [m.name for m in result.matches] == ["bravo_tool"]  # built from the snapshot now current
    assert builds == [1]
    session.tool_search(queries=["currency"])
    assert builds == [1]
    session.close()
