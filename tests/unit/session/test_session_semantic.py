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
    monkeypatch.setenv(SEMANTIC_ENV, "hybrid")


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


def test_a_session_with_the_ensemble_answers_at_once_with_the_hybrid_and_then_with_the_ensemble(
    tmp_path: Path, hybrid_session_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    import numpy as np

    from tooldir.deferred import ensemble

    if not ensemble.ensemble_status(load=False)[0]:
        if os.environ.get("TOOLDIR_REQUIRE_SEMANTIC"):
            pytest.fail("TOOLDIR_REQUIRE_SEMANTIC is set but the [semantic-plus] extra is not installed")
        pytest.skip("the [semantic-plus] extra is not installed")
    gate = threading.Event()
    seen: list[ensemble.EnsembleRanker] = []
    asked: list[list[str]] = []

    class Blocked:  # a model whose embedding of the catalog waits on the test
        name, dim = "blocked", 2

        def embed(self, texts: list[str]) -> np.ndarray:
            assert gate.wait(60)
            asked.append(list(texts))
            return np.asarray([[1.0, 0.0] if "trip" in t or "car" in t else [0.0, 1.0] for t in texts], np.float32)

    real = ensemble.EnsembleRanker.start

    def start(self: ensemble.EnsembleRanker) -> None:
        seen.append(self)
        real(self)

    monkeypatch.setattr(ensemble, "load_ensemble", lambda: [Blocked()])
    monkeypatch.setattr(ensemble.EnsembleRanker, "start", start)
    monkeypatch.setenv(SEMANTIC_ENV, "ensemble")
    monkeypatch.setenv("TOOLDIR_STATE_DIR", str(tmp_path / "state"))
    s = setup(
        tmp_path, builtins={**BUILTINS, "rent_car": ("Rent a car for a trip.", {"type": "object", "properties": {}})}
    )
    result = s.session.tool_search(queries=["vehicle rental"])  # the model is blocked: the hybrid answers
    assert [m.name for m in result.matches] == ["rent_car"]
    assert seen and not seen[-1].ready()
    gate.set()
    assert seen[-1].wait(60)
    result = s.session.tool_search(queries=["car for my trip"])
    assert [m.name for m in result.matches][:1] == ["rent_car"]
    assert asked[-1] == ["car for my trip"]  # the ensemble's model embedded the query: it answered
