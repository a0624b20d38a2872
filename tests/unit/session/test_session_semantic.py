"""tool_search through a Session uses the hybrid ranker when the [semantic] extra is installed:
matches by meaning, explicit misses, select: and the (-score, name) order are unchanged."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sesskit import BUILTINS, setup

from tooldir.deferred.semantic import SEMANTIC_ENV, SemanticUnavailable, load_embedder


@pytest.fixture
def hybrid_session_env(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        load_embedder()
    except SemanticUnavailable as exc:
        if os.environ.get("TOOLDIR_REQUIRE_SEMANTIC"):
            pytest.fail(f"TOOLDIR_REQUIRE_SEMANTIC is set but the semantic ranker is unavailable: {exc}")
        pytest.skip(f"the [semantic] extra is not installed ({exc})")
    monkeypatch.delenv(SEMANTIC_ENV, raising=False)


def test_a_session_finds_a_deferred_tool_by_meaning_and_still_misses_nonsense(
    tmp_path: Path, hybrid_session_env: None
) -> None:
    # no parameters: the tool's one vector (issue 26) is its name and description alone; the
    # fixture's generic "text: the text" parameter would pull its cosine under the threshold
    rent_car = ("Rent a car for a trip.", {"type": "object", "properties": {}})
    s = setup(tmp_path, builtins={**BUILTINS, "rent_car": rent_car})
    result = s.session.tool_search(queries=["vehicle rental", "qwxzt vrrkp"])
    assert [m.name for m in result.matches] == ["rent_car"]
    assert result.missing == ("qwxzt vrrkp",)
    result = s.session.tool_search(queries=["select:stock_quote"])
    assert [m.name for m in result.matches] == ["stock_quote"] and result.matches[0].score is None


def test_with_the_ranker_disabled_a_session_is_plain_bm25f(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SEMANTIC_ENV, "off")
    s = setup(tmp_path, builtins={**BUILTINS, "rent_car": "Rent a car for a trip."})
    result = s.session.tool_search(queries=["vehicle rental"])
    assert result.matches == () and result.missing == ("vehicle rental",)
