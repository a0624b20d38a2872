"""The session gate: deferred tools need discovery, immediate tools are called directly, stale schemas are refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sesskit import defer_policy, republish, setup
from toolkit import make_tool

from tooldir.policy import DeferPolicy, PermissionsPolicy, Policy


@pytest.mark.both_rankers
def test_deferred_tool_is_refused_with_a_search_hint_until_the_session_loads_it(tmp_path: Path) -> None:
    # session:unloaded
    s = setup(tmp_path)
    refused = s.session.call("stock_quote", {"text": "ACME"})
    assert not refused.ok
    assert refused.error is not None and refused.error.code == "session:unloaded"
    assert "tool_search" in refused.error.message
    found = s.session.tool_search(tool_names=["stock_quote"])
    assert [m.name for m in found.matches] == ["stock_quote"]
    ran = s.session.call("stock_quote", {"text": "ACME"})
    assert ran.ok and ran.content == {"echo": {"text": "ACME"}}


@pytest.mark.both_rankers
def test_defer_execute_tool_refuses_immediate_tools_and_runs_loaded_deferred_ones(tmp_path: Path) -> None:
    policy = defer_policy(rules=("Defer(*)", "NoDefer(translate_text)"))
    s = setup(tmp_path, policy=policy)
    immediate = s.session.call("defer_execute_tool", {"name": "translate_text", "input": {"text": "hi"}})
    assert immediate.error is not None and immediate.error.code == "session:immediate"
    assert "call it directly" in immediate.error.message
    assert s.session.call("translate_text", {"text": "hi"}).ok
    unloaded = s.session.call("defer_execute_tool", {"name": "weather_lookup", "input": {"text": "Oslo"}})
    assert unloaded.error is not None and unloaded.error.code == "session:unloaded"
    s.session.tool_search(queries=["weather forecast city"])
    ran = s.session.call("defer_execute_tool", {"name": "weather_lookup", "input": {"text": "Oslo"}})
    assert ran.ok and ran.content == {"echo": {"text": "Oslo"}}


def test_defer_execute_tool_with_malformed_arguments_is_an_invalid_input_result(tmp_path: Path) -> None:
    s = setup(tmp_path)
    for bad in ({"input": {}}, {"name": "x", "input": [1]}, "text", {"name": 3, "input": {}}):
        result = s.session.call("defer_execute_tool", bad)
        assert result.error is not None and result.error.code == "invalid-input"


@pytest.mark.both_rankers
def test_call_against_a_changed_schema_is_refused_as_stale_until_loaded_again(tmp_path: Path) -> None:
    # session:stale
    user = tmp_path / "user"
    folder = make_tool(user, "jira_get_issue", description="Read one Jira issue by key.")
    s = setup(tmp_path, user_dir=user, builtins={})
    assert [m.name for m in s.session.tool_search(tool_names=["jira_get_issue"]).matches] == ["jira_get_issue"]
    assert s.session.call("jira_get_issue", {"text": "X-1"}).ok
    data = json.loads((folder / "schema.json").read_text())
    data["input_schema"]["properties"]["project"] = {"type": "string"}
    data["input_schema"]["required"] = ["text", "project"]
    (folder / "schema.json").write_text(json.dumps(data))
    republish(s)
    stale = s.session.call("jira_get_issue", {"text": "X-1"})
    assert stale.error is not None and stale.error.code == "session:stale"
    assert len(s.sandbox.requests) == 1  # nothing ran for the stale call
    again = s.session.tool_search(tool_names=["jira_get_issue"])
    assert again.matches[0].load_state == "loaded"
    assert "project" in again.matches[0].schema["input_schema"]["properties"]
    assert s.session.call("jira_get_issue", {"text": "X-1", "project": "X"}).ok
    assert len(s.sandbox.requests) == 2


def _edit(folder: Path, **changes: Any) -> None:
    data = json.loads((folder / "schema.json").read_text())
    data.update(changes)
    (folder / "schema.json").write_text(json.dumps(data))


def test_an_immediate_tool_whose_description_alone_changed_runs_and_the_client_hears_list_changed(
    tmp_path: Path,
) -> None:
    user = tmp_path / "user"
    folder = make_tool(user, "notes_read", description="Read notes.")
    s = setup(tmp_path, user_dir=user, builtins={}, policy=Policy(defer=DeferPolicy(mode="off")))
    assert [d.name for d in s.session.working_set()] == ["notes_read"]
    versions: list[int] = []
    s.session.subscribe(versions.append)
    _edit(folder, description="Read notes, newest first.")
    republish(s)
    assert versions == [1]  # tools/list_changed: the next listing shows the new description
    ran = s.session.call("notes_read", {"text": "a"})
    assert ran.ok and ran.error is None
    assert len(s.sandbox.requests) == 1
    assert [d.description for d in s.session.working_set()] == ["Read notes, newest first."]


def test_an_immediate_tool_whose_risk_changed_is_stale_until_the_next_working_set(tmp_path: Path) -> None:
    user = tmp_path / "user"
    folder = make_tool(user, "notes_read", risk="read")
    s = setup(tmp_path, user_dir=user, builtins={}, policy=Policy(defer=DeferPolicy(mode="off")))
    s.session.working_set()
    _edit(folder, risk="write")
    republish(s)
    stale = s.session.call("notes_read", {"text": "a"})
    assert stale.error is not None and stale.error.code == "session:stale"
    assert s.sandbox.requests == []
    s.session.working_set()
    assert s.session.call("notes_read", {"text": "a"}).ok


@pytest.mark.both_rankers
def test_a_loaded_deferred_tool_whose_description_alone_changed_still_runs(tmp_path: Path) -> None:
    user = tmp_path / "user"
    folder = make_tool(user, "jira_get_issue", description="Read one Jira issue by key.")
    s = setup(tmp_path, user_dir=user, builtins={})
    s.session.tool_search(tool_names=["jira_get_issue"])
    _edit(folder, description="Read one Jira issue by its key.")
    republish(s)
    assert s.session.call("jira_get_issue", {"text": "X-1"}).ok
    again = s.session.tool_search(tool_names=["jira_get_issue"])  # the model may read the new text
    assert again.matches[0].load_state == "loaded" and "its key" in again.matches[0].schema["description"]


def test_eager_tool_that_changes_after_the_model_saw_it_is_stale_until_the_next_working_set(tmp_path: Path) -> None:
    user = tmp_path / "user"
    folder = make_tool(user, "notes_read")
    s = setup(tmp_path, user_dir=user, builtins={}, policy=Policy(defer=DeferPolicy(mode="off")))
    assert [d.name for d in s.session.working_set()] == ["notes_read"]
    data = json.loads((folder / "schema.json").read_text())
    data["input_schema"]["properties"]["extra"] = {"type": "string"}
    (folder / "schema.json").write_text(json.dumps(data))
    republish(s)
    stale = s.session.call("notes_read", {"text": "a"})
    assert stale.error is not None and stale.error.code == "session:stale"
    s.session.working_set()  # the next request shows the new schema
    assert s.session.call("notes_read", {"text": "a"}).ok


def test_nodefer_beats_defer_whatever_the_order_and_guard_tools_are_never_deferred(tmp_path: Path) -> None:
    policy = defer_policy(
        rules=("NoDefer(calendar_*)", "Defer(*)", "Defer(calendar_list_events)", "Defer(tool_search)")
    )
    s = setup(tmp_path, policy=policy)
    first_turn = [d.name for d in s.session.working_set()]
    assert first_turn == [
        "calendar_create_event",
        "calendar_list_events",
        "tool_search",
        "defer_execute_tool",
    ]
    assert {e.name for e in s.session.directory()} == {"stock_quote", "translate_text", "weather_lookup"}
    assert not s.session.is_deferred("tool_search")
    assert not s.session.is_deferred("defer_execute_tool")
    assert s.session.call("calendar_list_events", {"text": "today"}).ok


def test_defer_mode_off_offers_every_tool_eagerly_and_no_guard_tools(tmp_path: Path) -> None:
    s = setup(tmp_path, policy=Policy(defer=DeferPolicy(mode="off")))
    names = [d.name for d in s.session.working_set()]
    assert "tool_search" not in names and len(names) == 5
    assert s.session.directory() == []


def test_auto_mode_defers_only_when_the_saving_beats_the_cost_of_the_search_tools(tmp_path: Path) -> None:
    two = {"weather_lookup": "Look up the weather.", "stock_quote": "Get a stock quote."}
    small = setup(tmp_path / "a", policy=Policy(), builtins=two)
    assert small.session.directory() == []
    decision = small.session.defer_decision
    assert decision["saving_tokens_at_least"] <= 0 and "more than it saves" in decision["reason"]
    long_text = "Query the inventory database for stock levels, reorder points and supplier lead times. " * 6
    many = {f"inventory_tool_{i}": long_text for i in range(30)}
    big = setup(tmp_path / "b", policy=Policy(), builtins=many)
    assert len(big.session.directory()) == 30
    decision = big.session.defer_decision
    assert decision["saving_tokens_at_least"] > 0
    report = big.session.token_report()
    assert report.first_turn < report.full_load


@pytest.mark.both_rankers
def test_a_tool_the_session_does_not_offer_is_refused_even_if_the_registry_would_run_it(tmp_path: Path) -> None:
    # session:unloaded through a policy the registry reloaded (looser) while the session kept its own
    hidden = Policy(defer=DeferPolicy(mode="on", rules=("Defer(*)",)), permissions=PermissionsPolicy(deny=("stock_*",)))
    s = setup(tmp_path, policy=hidden)
    assert [n for n, _ in s.session.tool_search(tool_names=["stock_quote"]).unavailable] == ["stock_quote"]
    s.registry.update_policy(defer_policy())  # the registry now allows stock_quote
    for refused in (
        s.session.call("stock_quote", {"text": "ACME"}),
        s.session.call("defer_execute_tool", {"name": "stock_quote", "input": {"text": "ACME"}}),
    ):
        assert not refused.ok and refused.error is not None
        assert refused.error.code == "permission-denied"
    assert s.session.loaded() == []


@pytest.mark.both_rankers
def test_a_deferred_tool_published_a_moment_ago_is_refused_until_the_session_loads_it(tmp_path: Path) -> None:
    # session:unloaded in the window where the store already holds the new snapshot but the
    # session's view does not yet: a call then must not reach the tool unseen
    user = tmp_path / "user"
    make_tool(user, "alpha_tool")
    s = setup(tmp_path, user_dir=user, builtins={})
    seen: list[Any] = []
    s.store._subscribers.insert(0, lambda snap, change: seen.append(s.session.call("beta_tool", {"text": "x"})))
    make_tool(user, "beta_tool")
    republish(s)
    assert seen[0].error is not None and seen[0].error.code == "session:unloaded"
    assert s.sandbox.requests == []
    assert s.session.is_deferred("beta_tool")
    assert [m.name for m in s.session.tool_search(tool_names=["beta_tool"]).matches] == ["beta_tool"]
    assert s.session.call("beta_tool", {"text": "x"}).ok


@pytest.mark.both_rankers
def test_a_reloaded_policy_reaches_the_session_and_changes_what_it_offers(tmp_path: Path) -> None:
    # tooldir serve passes a reloaded policy file to the session: a loosened deny rule makes the
    # tool discoverable again (it still has to be loaded), a tightened one hides it at once
    hidden = Policy(defer=DeferPolicy(mode="on", rules=("Defer(*)",)), permissions=PermissionsPolicy(deny=("stock_*",)))
    s = setup(tmp_path, policy=hidden)
    versions: list[int] = []
    s.session.subscribe(versions.append)
    assert [n for n, _ in s.session.tool_search(tool_names=["stock_quote"]).unavailable] == ["stock_quote"]
    s.registry.update_policy(defer_policy())
    s.session.update_policy(defer_policy())
    refused = s.session.call("stock_quote", {"text": "ACME"})
    assert refused.error is not None and refused.error.code == "session:unloaded"
    assert [m.name for m in s.session.tool_search(tool_names=["stock_quote"]).matches] == ["stock_quote"]
    assert s.session.call("stock_quote", {"text": "ACME"}).ok
    s.registry.update_policy(hidden)
    s.session.update_policy(hidden)
    assert "stock_quote" not in [d.name for d in s.session.working_set()]
    denied = s.session.call("stock_quote", {"text": "ACME"})
    assert denied.error is not None and denied.error.code == "permission-denied"
    assert versions and versions == sorted(versions)
