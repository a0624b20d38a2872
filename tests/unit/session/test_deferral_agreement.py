"""Deferral is decided once: ``scan --json``'s ``deferred``, ``catalog``, a fresh Session's first
listing and ``tooldir serve``'s first ``tools/list`` agree in every defer mode, with every rule set,
on small and large tool sets, with the o200k tokenizer and with the estimate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from toolkit import make_tool, project_tools

import tooldir.deferred.tokens
from tooldir._cli import main
from tooldir.deferred.defer import plan_deferral, rules_defer
from tooldir.deferred.session import Session, initial_plan
from tooldir.deferred.tokens import TokenCounter
from tooldir.mcp.server import ToolServer
from tooldir.policy import DeferPolicy, parse_policy
from tooldir.snapshot.loader import Loader, make_config
from tooldir.snapshot.store import SnapshotStore

GUARDS = {"tool_search", "defer_execute_tool"}
LONG = "Query the inventory database for stock levels, reorder points and supplier lead times. " * 6

TOOL_SETS = {
    # auto mode: deferring two short tools costs more than it saves
    "small": {"echo_text": "Echo the text.", "notes_find": "Find notes by keyword."},
    # auto mode: deferring thirty long tools pays off
    "large": {"echo_text": "Echo the text.", **{f"inventory_tool_{i}": LONG for i in range(30)}},
}
RULES = {
    "defer-all": ["Defer(*)"],
    "nodefer-echo": ["Defer(*)", "NoDefer(echo_*)"],
    "defer-inventory": ["Defer(inventory_*)"],
    "none": [],
}


def _policy_text(mode: str, rules: list[str]) -> str:
    # a pending project tool and a tool hidden by permissions are never offered
    return f'[defer]\nmode = "{mode}"\nrules = {json.dumps(rules)}\n\n[permissions]\ndeny = ["hidden_*"]\n'


@pytest.fixture(params=["default-counter", "estimate"])
def counter_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The process-wide counter every reader uses: o200k when bpe-openai is installed, or the
    estimate (as without the optional extra)."""
    if request.param == "estimate":
        monkeypatch.setattr(tooldir.deferred.tokens, "_default", TokenCounter(prefer_exact=False))
    return str(request.param)


@pytest.mark.parametrize("mode", ["auto", "on", "off"])
@pytest.mark.parametrize("rules", list(RULES))
@pytest.mark.parametrize("tool_set", list(TOOL_SETS))
def test_scan_catalog_a_fresh_session_and_serve_agree_on_what_is_deferred(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    counter_kind: str,
    *,
    mode: str,
    rules: str,
    tool_set: str,
) -> None:
    user, project, state = tmp_path / "user", tmp_path / "project", tmp_path / "state"
    for name, description in TOOL_SETS[tool_set].items():
        make_tool(user, name, description=description)
    make_tool(user, "hidden_tool", description=LONG)
    make_tool(project_tools(project), "pending_tool", description=LONG)
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text(_policy_text(mode, RULES[rules]))
    args = ["--project", str(project), "--user-dir", str(user), "--state-dir", str(state), "--policy", str(policy_file)]

    assert main(["scan", *args, "--json"]) == 0
    scan = {t["name"]: t for t in json.loads(capsys.readouterr().out)["tools"]}
    assert scan["pending_tool"]["status"] == "pending"
    assert main(["catalog", *args, "--json"]) == 0
    catalog = json.loads(capsys.readouterr().out)
    assert main(["list", *args, "--all", "--json"]) == 0
    listing = {t["name"]: t["deferred"] for t in json.loads(capsys.readouterr().out)["tools"]}
    assert listing == {name: t["deferred"] for name, t in scan.items()}
    assert main(["show", "echo_text", *args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["records"][0]["deferred"] is scan["echo_text"]["deferred"]

    policy = parse_policy(policy_file.read_text())
    config = make_config(project=project, user_dirs=[user], policy=policy, state_dir=state)
    store = SnapshotStore(Loader(config).load())
    session = Session(store, policy=policy)
    listed = {d.name for d in session.working_set()}
    session.close()
    server = ToolServer.open(config, watch=False)
    try:
        served = {t["name"] for t in server.list_tools_sync()}
    finally:
        server.close()

    offered = set(TOOL_SETS[tool_set])
    assert listed - GUARDS == offered - {e["name"] for e in catalog["directory"]}
    assert served == listed
    deferred = {n for n in offered if scan[n]["deferred"]}
    assert deferred == {e["name"] for e in catalog["directory"]}
    assert deferred == offered - listed
    assert listed >= GUARDS if deferred else not listed & GUARDS
    assert catalog["tokens"]["deferred"] == len(deferred)
    # not offered: what the plan would do with them, never deferred when the plan defers nothing
    for name in ("pending_tool", "hidden_tool"):
        would = (bool(deferred) or mode == "on") and rules_defer(policy.defer, name)
        assert scan[name]["deferred"] is would


def test_auto_mode_on_a_small_set_is_reported_eager_everywhere(tmp_path: Path) -> None:
    # the bug this guards against: the record said deferred (the rules) while the session listed it eagerly
    user = tmp_path / "user"
    for name, description in TOOL_SETS["small"].items():
        make_tool(user, name, description=description)
    policy = parse_policy(_policy_text("auto", ["Defer(*)"]))
    snap = Loader(make_config(project=None, user_dirs=[user], policy=policy, state_dir=tmp_path / "s")).load()
    plan = initial_plan(snap, policy=policy, counter=TokenCounter(prefer_exact=False))
    assert snap.by_name["echo_text"].defer_candidate  # the rules' candidate, kept on the record
    assert snap.by_name["echo_text"].to_json(plan.is_deferred)["deferred"] is False  # the JSON says the plan's answer
    assert "deferred" not in snap.to_json()["tools"][0]  # and without a plan, nothing
    assert not plan.is_deferred("echo_text") and plan.deferred == frozenset()
    assert plan.decision["reason"] == "auto: deferring would cost more than it saves"


def test_the_plan_of_nothing_offered_defers_nothing_and_says_so() -> None:
    plan = plan_deferral({}, DeferPolicy(mode="auto"), TokenCounter(prefer_exact=False))
    assert plan.deferred == frozenset() and not plan.engaged
    assert dict(plan.decision) == {"mode": "auto", "candidates": 0}


@pytest.mark.both_rankers
def test_a_session_s_dynamic_state_leaves_its_static_plan_alone(tmp_path: Path) -> None:
    user = tmp_path / "user"
    for name, description in TOOL_SETS["large"].items():
        make_tool(user, name, description=description)
    policy = parse_policy(_policy_text("on", ["Defer(inventory_*)"]))
    store = SnapshotStore(Loader(make_config(project=None, user_dirs=[user], policy=policy)).load())
    session = Session(store, policy=policy, counter=TokenCounter(prefer_exact=False))
    before: Any = session.deferral_plan
    session.tool_search(tool_names=["inventory_tool_3"])
    assert "inventory_tool_3" in {d.name for d in session.working_set()}  # loaded: this session's own state
    assert session.deferral_plan is before and before.is_deferred("inventory_tool_3")
    assert session.is_deferred("inventory_tool_3")
    session.close()
