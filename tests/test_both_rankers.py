"""The suite's two-ranker parametrisation really switches the ranker (tests/conftest.py)."""

from __future__ import annotations

import os

import pytest


@pytest.mark.both_rankers
def test_a_both_rankers_test_runs_on_plain_bm25f_in_its_bm25f_pass_and_semantic_in_the_other(
    request: pytest.FixtureRequest,
) -> None:
    mode = request.node.callspec.params["ranker_pass"]
    assert ("ranker_pass", mode) in request.node.user_properties  # what the summary counts by
    if mode == "bm25f":
        assert os.environ.get("TOOLDIR_SEMANTIC") == "off"
        assert "TOOLDIR_REQUIRE_SEMANTIC" not in os.environ
    else:
        assert mode == "semantic"
        assert os.environ.get("TOOLDIR_SEMANTIC") != "off"
