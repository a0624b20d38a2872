"""tool_search: exact names, keyword queries, explicit misses, unavailable tools, budgets and repeat hints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sesskit import defer_policy, setup
from toolkit import make_tool, project_tools

from tooldir.deferred.session import IndexFollower, Session
from tooldir.deferred.tokens import TokenCounter
from tooldir.policy import PermissionsPolicy
from tooldir.snapshot.loader import Loader, make_config
from tooldir.snapshot.store import SnapshotStore


@pytest.mark.both_rankers
def test_exact_names_keep_the_callers_order_and_fold_duplicates(tmp_path: Path) -> None:
    s = setup(tmp_path)
    result = s.session.tool_search(
        tool_names=["translate_text", "stock_quote", "translate_text"],
        queries=["select:weather_lookup, stock_quote"],
    )
    assert [m.name for m in result.matches] == ["translate_text", "stock_quote", "weather_lookup"]
    assert all(m.score is None and m.load_state == "loaded" for m in result.matches)
    assert result.matches[0].schema["input_schema"]["required"] == ["text"]
    assert result.missing == ()


@pytest.mark.both_rankers
def test_keyword_matches_are_ordered_by_score_then_name_and_carry_full_schemas(tmp_path: Path) -> None:
    s = setup(tmp_path)
    result = s.session.tool_search(queries=["calendar events"], top_k=5)
    names = [m.name for m in result.matches]
    assert set(names) == {"calendar_create_event", "calendar_list_events"}
    scores = [m.score for m in result.matches]
    assert all(isinstance(x, float) for x in scores)
    keys = [(-(m.score or 0.0), m.name) for m in result.matches]
    assert keys == sorted(keys)
    assert result.matches[0].schema["name"] == names[0]


@pytest.mark.both_rankers
def test_required_terms_filter_keyword_matches(tmp_path: Path) -> None:
    s = setup(tmp_path)
    result = s.session.tool_search(queries=["calendar +list"])
    assert [m.name for m in result.matches] == ["calendar_list_events"]


@pytest.mark.both_rankers
def test_a_miss_is_reported_as_missing_and_changes_no_state(tmp_path: Path) -> None:
    s = setup(tmp_path)
    version, loaded, log = s.session.version, s.session.loaded(), s.session.explanations()
    result = s.session.tool_search(tool_names=["no_such_tool"], queries=["quantum chromodynamics"])
    assert result.matches == ()
    assert result.missing == ("no_such_tool", "quantum chromodynamics")
    assert (s.session.version, s.session.loaded(), s.session.explanations()) == (version, loaded, log)
    refused = s.session.call("weather_lookup", {"text": "x"})
    assert refused.error is not None and refused.error.code == "session:unloaded"
    # a miss does not use up the per-turn search budget either
    tight = setup(tmp_path / "tight", policy=defer_policy(max_searches_per_turn=1))
    tight.session.tool_search(queries=["nothing matches this"])
    assert tight.session.tool_search(queries=["weather"]).matches


@pytest.mark.both_rankers
def test_tools_hidden_by_permissions_are_listed_unavailable_with_the_reason(tmp_path: Path) -> None:
    policy = defer_policy().model_copy(update={"permissions": PermissionsPolicy(deny=("stock_*",))})
    s = setup(tmp_path, policy=policy)
    result = s.session.tool_search(tool_names=["stock_quote"], queries=["stock price ticker"])
    assert result.matches == ()
    assert [n for n, _ in result.unavailable] == ["stock_quote"]
    assert "stock_*" in result.unavailable[0][1]
    assert "stock_quote" not in {e.name for e in s.session.directory()}
    assert s.session.loaded() == []


@pytest.mark.both_rankers
def test_a_pending_project_tool_is_unavailable_not_missing(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    make_tool(project_tools(project), "deploy_site", description="Deploy the site to production.")
    from tooldir.deferred.session import Session
    from tooldir.deferred.tokens import TokenCounter
    from tooldir.snapshot.loader import Loader, make_config
    from tooldir.snapshot.store import SnapshotStore

    policy = defer_policy()
    store = SnapshotStore(Loader(make_config(project=project, user_dirs=[], policy=policy, state_dir=tmp_path)).load())
    session = Session(store, policy=policy, counter=TokenCounter(prefer_exact=False))
    result = session.tool_search(tool_names=["deploy_site"], queries=["deploy production"])
    assert result.missing == ("deploy production",)
    assert [n for n, _ in result.unavailable] == ["deploy_site"]
    assert "not-approved" in result.unavailable[0][1]


@pytest.mark.both_rankers
def test_repeating_an_identical_search_returns_a_hint_instead_of_the_same_answer(tmp_path: Path) -> None:
    s = setup(tmp_path)
    first = s.session.tool_search(queries=["weather"])
    assert [m.name for m in first.matches] == ["weather_lookup"]
    again = s.session.tool_search(queries=["weather"])
    assert again.matches == ()
    assert again.hint is not None and "weather_lookup" in again.hint
    s.session.next_turn()
    assert s.session.tool_search(queries=["weather"]).matches[0].load_state == "cached"


@pytest.mark.both_rankers
def test_the_per_turn_search_budget_is_enforced_and_resets_next_turn(tmp_path: Path) -> None:
    s = setup(tmp_path, policy=defer_policy(max_searches_per_turn=2))
    assert s.session.tool_search(queries=["weather"]).matches
    assert s.session.tool_search(queries=["stock"]).matches
    over = s.session.tool_search(queries=["translate"])
    assert over.matches == () and over.hint is not None and "budget" in over.hint
    assert "translate_text" not in s.session.loaded()
    s.session.next_turn()
    assert s.session.tool_search(queries=["translate"]).matches


@pytest.mark.both_rankers
def test_working_set_and_schema_token_budgets_withhold_extra_matches(tmp_path: Path) -> None:
    s = setup(tmp_path, policy=defer_policy(max_working_set=2))
    result = s.session.tool_search(tool_names=["weather_lookup", "stock_quote", "translate_text"])
    assert [m.name for m in result.matches] == ["weather_lookup", "stock_quote"]
    assert result.hint is not None and "translate_text" in result.hint
    assert s.session.loaded() == ["weather_lookup", "stock_quote"]
    t = setup(tmp_path / "t", policy=defer_policy(max_schema_tokens_per_turn=100))
    result = t.session.tool_search(tool_names=["weather_lookup", "stock_quote", "translate_text"])
    assert len(result.matches) < 3 and result.hint is not None


@pytest.mark.both_rankers
def test_tool_search_through_call_validates_its_input(tmp_path: Path) -> None:
    s = setup(tmp_path)
    for bad in ({"top_k": 0, "queries": ["x"]}, {"queries": "x", "nope": 1}, {}, {"tool_names": [3]}, []):
        result = s.session.call("tool_search", bad)
        assert result.error is not None and result.error.code == "invalid-input"
    ok = s.session.call("tool_search", {"queries": ["weather"], "top_k": 3})
    assert ok.ok and ok.content["matches"][0]["name"] == "weather_lookup"
    assert set(ok.content) == {"matches", "missing", "unavailable"}


@pytest.mark.both_rankers
def test_a_directory_tool_is_found_by_its_parameter_descriptions(tmp_path: Path) -> None:
    user = tmp_path / "user"
    make_tool(
        user,
        "geo_lookup",
        description="Resolve a place.",
        input_schema={
            "type": "object",
            "properties": {"postcode": {"type": "string", "description": "postal code of the address"}},
        },
    )
    s = setup(tmp_path, user_dir=user)
    assert [m.name for m in s.session.tool_search(queries=["postal code"]).matches] == ["geo_lookup"]
    assert s.session.tool_search(queries=["postal code"]).matches == ()  # repeat: hint, not the same answer


@pytest.mark.both_rankers
def test_the_search_index_misses_no_publication_made_while_it_is_being_built(tmp_path: Path) -> None:
    user = tmp_path / "user"
    make_tool(user, "alpha_tool", description="First tool.")
    config = make_config(project=None, user_dirs=[user], policy=defer_policy(), state_dir=tmp_path / "s")
    loader = Loader(config)

    class RacyStore(SnapshotStore):
        """Publishes a change just before the first subscriber is added (another thread's timing)."""

        racing = True

        def subscribe(self, fn: Any) -> Any:
            if self.racing:
                self.racing = False
                make_tool(user, "bravo_tool", description="Convert currency amounts.")
                self.publish(loader.load())
            return super().subscribe(fn)

    store = RacyStore(loader.load())
    follower = IndexFollower(store)
    make_tool(user, "charlie_tool", description="Third tool.")
    store.publish(loader.load())
    session = Session(store, policy=defer_policy(), follower=follower, counter=TokenCounter(prefer_exact=False))
    result = session.tool_search(queries=["currency"])
    assert [m.name for m in result.matches] == ["bravo_tool"]
    snapshot, index = follower.current
    assert snapshot is store.current and set(index.names()) == {"alpha_tool", "bravo_tool", "charlie_tool"}


@pytest.mark.both_rankers
def test_the_exact_name_of_an_immediate_tool_is_missing_with_the_reason_and_changes_no_state(tmp_path: Path) -> None:
    s = setup(tmp_path, policy=defer_policy(rules=("Defer(*)", "NoDefer(translate_text)")))
    version = s.session.version
    result = s.session.tool_search(tool_names=["translate_text"])
    assert result.matches == ()
    assert result.missing == ("translate_text",)
    assert [n for n, _ in result.missing_reasons] == ["translate_text"]
    assert result.missing_reasons[0][1].startswith("immediate:")
    assert result.to_json()["missing_reasons"] == [{"name": "translate_text", "reason": result.missing_reasons[0][1]}]
    assert (s.session.version, s.session.loaded()) == (version, [])
    mixed = s.session.tool_search(tool_names=["translate_text", "stock_quote"])  # the deferred one still loads
    assert [m.name for m in mixed.matches] == ["stock_quote"] and mixed.missing == ("translate_text",)
    assert s.session.loaded() == ["stock_quote"]
    content = s.session.call("tool_search", {"tool_names": ["translate_text"]}).content
    assert content["missing"] == ["translate_text"] and content["matches"] == []
    assert content["missing_reasons"][0]["name"] == "translate_text"


@pytest.mark.both_rankers
def test_the_cli_view_still_shows_an_immediate_tool_asked_for_by_name(tmp_path: Path) -> None:
    s = setup(tmp_path, policy=defer_policy(rules=("Defer(*)", "NoDefer(translate_text)")))
    result = s.session.tool_search(tool_names=["translate_text"], scope="all")
    assert [m.name for m in result.matches] == ["translate_text"] and result.missing_reasons == ()
