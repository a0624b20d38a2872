"""The drill runner and the managed policy (issue 27 item 5): a scenario's ``managed_policy`` is
what the drill's tooldir reads as /etc/tooldir/policy.toml, and a drill never reads the machine's."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

import tooldir.policy as policy_module
from tooldir.drill import Scenario
from tooldir.drill.plant import isolated, make_arena

BASE = {
    "threat": "policy:partial",
    "title": "t",
    "plants": "p",
    "expected": "e",
    "control": {"user": ["good_user_tool"]},
}


def test_a_scenario_with_a_managed_policy_must_require_root() -> None:
    with pytest.raises(ValidationError, match='requires = \\["root"\\]'):
        Scenario.model_validate({**BASE, "managed_policy": "[sandbox]\n"})


def test_a_scenario_with_a_managed_policy_may_not_start_a_tooldir_process() -> None:
    step = {"do": "python-m-tooldir", "args": ["scan"]}
    with pytest.raises(ValidationError, match="python-m-tooldir step would read the machine's own managed policy"):
        Scenario.model_validate({**BASE, "requires": ["root"], "managed_policy": "[sandbox]\n", "steps": [step]})


def test_inside_a_drill_the_managed_policy_path_is_the_arenas_and_it_is_restored_after(tmp_path: Path) -> None:
    before = policy_module.MANAGED_POLICY_PATH
    arena = make_arena(tmp_path / "arena", str(tmp_path))
    with isolated(arena):
        assert arena.managed_policy == policy_module.MANAGED_POLICY_PATH
        assert str(arena.managed_policy).startswith(str(tmp_path))
        assert policy_module.read_managed_policy() is None  # nothing written: no managed policy at all
    assert before == policy_module.MANAGED_POLICY_PATH
