"""Re-deferral by the discounted Beta usage model, pins, persisted priors, change notifications."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest
from sesskit import defer_policy, republish, setup
from toolkit import make_tool

from tooldir.deferred.usage import Usage, end_turn, judge, load_priors, start
from tooldir.errors import StateError
from tooldir.policy import DeferPolicy, Policy


@pytest.mark.both_rankers
def test_an_idle_loaded_tool_is_redeferred_with_the_numbers_that_decided_it(tmp_path: Path) -> None:
    s = setup(tmp_path, policy=defer_policy(min_idle_turns=2))
    s.session.tool_search(tool_names=["weather_lookup"])
    assert s.session.call("weather_lookup", {"text": "Oslo"}).ok
    assert s.session.next_turn() == []  # used this turn: kept
    assert s.session.next_turn() == []  # idle 1 < 2
    step = s.session.next_turn()  # idle 2: re-deferred
    assert [(e["tool"], e["action"]) for e in step] == [("weather_lookup", "re-deferred")]
    event = step[0]
    assert event["idle_turns"] == 2
    assert event["expected_search_cost_tokens"] < event["keep_cost_tokens"]
    assert 0 < event["p_use"] < 1
    assert s.session.loaded() == []
    refused = s.session.call("weather_lookup", {"text": "Oslo"})
    assert refused.error is not None and refused.error.code == "session:unloaded"
    actions = [e["action"] for e in s.session.explanations()]
    assert actions == ["promoted", "re-deferred"]


@pytest.mark.both_rankers
def test_a_pinned_tool_never_redefers(tmp_path: Path) -> None:
    s = setup(tmp_path, policy=defer_policy(min_idle_turns=1))
    s.session.tool_search(tool_names=["stock_quote"])
    s.session.pin("stock_quote")
    for _ in range(6):
        s.session.next_turn()
    assert s.session.loaded() == ["stock_quote"]
    with pytest.raises(ValueError, match="not a loaded deferred tool"):
        s.session.pin("translate_text")


def test_a_frequently_used_tool_stays_when_keeping_it_is_cheaper_than_searching_again() -> None:
    policy = DeferPolicy(min_idle_turns=1, search_cost_tokens=400)
    usage = start(policy, prior=0.9)
    for _ in range(5):
        usage = end_turn(policy, usage, used=True)
    usage = end_turn(policy, usage, used=False)
    verdict = judge(policy, usage, schema_tokens=50, pinned=False)
    assert not verdict.redefer
    assert verdict.numbers["expected_search_cost_tokens"] >= 50


def test_the_beta_model_discounts_old_evidence_each_turn() -> None:
    policy = DeferPolicy(discount=0.5, prior_strength=2.0, default_prior=0.5)
    usage = start(policy, prior=None)
    assert (usage.alpha, usage.beta) == (1.0, 1.0)
    usage = end_turn(policy, usage, used=True)
    assert (usage.alpha, usage.beta, usage.idle_turns) == (1.5, 0.5, 0)
    usage = end_turn(policy, usage, used=False)
    assert (usage.alpha, usage.beta, usage.idle_turns) == (0.75, 1.25, 1)
    assert usage.p_use == pytest.approx(0.375)


@pytest.mark.both_rankers
def test_usage_priors_persist_across_sessions_as_a_moving_average(tmp_path: Path) -> None:
    s = setup(tmp_path, policy=defer_policy(usage_ewma=0.5))
    s.session.tool_search(tool_names=["weather_lookup"])
    s.session.call("weather_lookup", {"text": "a"})
    s.session.next_turn()  # used
    s.session.next_turn()  # idle
    s.session.close()
    assert load_priors(s.state) == {"weather_lookup": 0.5}
    second = setup(tmp_path, policy=defer_policy(usage_ewma=0.5))
    second.session.tool_search(tool_names=["weather_lookup"])
    promoted = second.session.explanations()[0]
    assert promoted["p_use_prior"] == 0.5  # the persisted prior seeds the next session
    second.session.call("weather_lookup", {"text": "a"})
    second.session.next_turn()  # used in 1 of 1 turns
    second.session.close()
    data = json.loads((s.state / "usage.json").read_text())
    assert data["tools"]["weather_lookup"] == {"p_use": 0.75, "sessions": 2}


def test_a_corrupt_usage_file_is_a_clear_state_error(tmp_path: Path) -> None:
    (tmp_path / "usage.json").write_text("{not json")
    with pytest.raises(StateError, match="not valid JSON"):
        load_priors(tmp_path)


@pytest.mark.both_rankers
def test_working_set_changes_bump_the_version_and_notify_subscribers(tmp_path: Path) -> None:
    user = tmp_path / "user"
    folder = make_tool(user, "notes_read")
    s = setup(tmp_path, user_dir=user)
    seen: list[int] = []
    unsubscribe = s.session.subscribe(seen.append)
    s.session.tool_search(tool_names=["weather_lookup"])
    assert seen == [1]
    s.session.tool_search(queries=["no match whatsoever"])
    assert seen == [1]  # a miss changes nothing
    republish(s)  # nothing changed on disk: the working set is the same
    assert seen == [1]
    s.session.tool_search(tool_names=["notes_read"])
    assert seen == [1, 2]
    data = json.loads((folder / "schema.json").read_text())
    data["description"] = "Read notes, now with more detail."
    (folder / "schema.json").write_text(json.dumps(data))
    republish(s)  # a loaded tool changed: the model's tool list must be refreshed
    assert seen == [1, 2, 3] and s.session.version == 3
    unsubscribe()
    s.session.tool_search(tool_names=["stock_quote"])
    assert seen == [1, 2, 3]


@pytest.mark.both_rankers
def test_a_loaded_tool_that_disappears_leaves_the_working_set(tmp_path: Path) -> None:
    user = tmp_path / "user"
    folder = make_tool(user, "notes_read")
    s = setup(tmp_path, user_dir=user, builtins={})
    s.session.tool_search(tool_names=["notes_read"])
    (folder / "schema.json").unlink()
    (folder / "run.py").unlink()
    folder.rmdir()
    republish(s)
    assert "notes_read" not in [d.name for d in s.session.working_set()]
    result = s.session.tool_search(tool_names=["notes_read"])
    assert result.missing == ("notes_read",)
    step = s.session.next_turn()
    assert [(e["tool"], e["action"], e["why"]) for e in step] == [("notes_read", "re-deferred", "no longer available")]


def test_usage_numbers_are_explained_for_a_fresh_tool() -> None:
    usage = Usage(alpha=0.4, beta=1.6)
    verdict = judge(DeferPolicy(), usage, schema_tokens=200, pinned=False)
    assert not verdict.redefer and "idle 0 < 3" in verdict.reason


@pytest.mark.both_rankers
def test_subscribers_are_notified_outside_the_session_lock(tmp_path: Path) -> None:
    s = setup(tmp_path)
    names: list[list[str]] = []

    def on_change(version: int) -> None:
        # another thread reads the working set while this callback waits for it (an MCP server does this)
        worker = threading.Thread(target=lambda: names.append([d.name for d in s.session.working_set()]))
        worker.start()
        worker.join(timeout=5)
        assert not worker.is_alive()

    s.session.subscribe(on_change)
    s.session.tool_search(tool_names=["stock_quote"])
    assert names == [["tool_search", "defer_execute_tool", "stock_quote"]]
    assert s.session.tool_search(tool_names=["stock_quote"]).tool_reference_blocks() == []  # repeat: hint only


@pytest.mark.both_rankers
def test_a_tool_loaded_again_after_re_deferral_gets_the_full_minimum_idle_turns(tmp_path: Path) -> None:
    s = setup(tmp_path, policy=defer_policy(min_idle_turns=2))
    s.session.tool_search(tool_names=["weather_lookup"])
    s.session.next_turn()  # idle 1
    assert [e["action"] for e in s.session.next_turn()] == ["re-deferred"]  # idle 2
    s.session.next_turn()
    s.session.tool_search(tool_names=["weather_lookup"])  # the model wants it again
    assert s.session.next_turn() == []  # idle 1 since it was loaded again: kept
    step = s.session.next_turn()
    assert [(e["action"], e["idle_turns"]) for e in step] == [("re-deferred", 2)]


@pytest.mark.both_rankers
def test_a_loaded_tool_that_becomes_eager_is_listed_once(tmp_path: Path) -> None:
    # auto mode stops deferring when most tools go away: the loaded tool is now an eager tool
    user = tmp_path / "user"
    long_text = "Query the inventory database for stock levels, reorder points and supplier lead times. " * 6
    for i in range(30):
        make_tool(user, f"inventory_tool_{i}", description=long_text)
    s = setup(tmp_path, user_dir=user, builtins={}, policy=Policy())
    s.session.tool_search(tool_names=["inventory_tool_3"])
    assert [d.name for d in s.session.working_set()] == ["tool_search", "defer_execute_tool", "inventory_tool_3"]
    for i in range(30):
        if i != 3:
            shutil.rmtree(user / f"inventory_tool_{i}")
    republish(s)
    assert not s.session.is_deferred("inventory_tool_3")
    assert [d.name for d in s.session.working_set()] == ["inventory_tool_3"]
    report = s.session.token_report()
    assert report.loaded_increment == 0 and report.first_turn == report.full_load


@pytest.mark.both_rankers
def test_closing_a_session_twice_folds_its_usage_into_the_priors_once(tmp_path: Path) -> None:
    s = setup(tmp_path, policy=defer_policy(usage_ewma=0.5))
    s.session.tool_search(tool_names=["weather_lookup"])
    s.session.call("weather_lookup", {"text": "a"})
    s.session.next_turn()
    s.session.close()
    s.session.close()  # e.g. ToolServer.close, documented idempotent, on two shutdown paths
    data = json.loads((s.state / "usage.json").read_text())
    assert data["tools"]["weather_lookup"] == {"p_use": 1.0, "sessions": 1}
