"""Every poisoned-directory scenario, as one test per drill (ids are the drill ids).

Each drill asserts the three things of STYLE §6 — the exact outcome code, state unchanged with no
canary written, and the other tools still loading — after proving its hostile tree was planted, plus
the audit record and the caller's isolation for execution drills, and that nothing outside the arena
changed. A drill about the runner itself (``expect.refused``, drill:arena-escape) stops at the plant
or step the runner must refuse: its outcome is that refusal.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tooldir._cli import command_line
from tooldir.drill import Scenario, load_scenarios, run_drill

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "tooldir" / "_data" / "scenarios"

ALL = load_scenarios(SCENARIOS)


def timed(scenario: Scenario) -> bool:
    """Whether the drill sets its own time bound (max_seconds): such drills run in the serial group."""
    return "max_seconds" in (SCENARIOS / scenario.name / "scenario.toml").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "scenario", [pytest.param(s, id=s.drill_id, marks=[pytest.mark.serial] if timed(s) else []) for s in ALL]
)
def test_poisoned_directory_ends_in_its_code_without_running_anything_while_good_tools_load(
    scenario: Scenario,
) -> None:
    result = run_drill(scenario, cli=command_line())
    if result.unavailable is not None and os.environ.get("TOOLDIR_REQUIRE_SANDBOX") != "1":
        pytest.skip(f"system facility missing on this machine: {result.unavailable}")
    checks = {c.name: c for c in result.checks}
    assert "runnable" not in checks, checks["runnable"].message
    if scenario.expect.refused is not None:  # a drill about the runner: it stops at the refusal
        assert sorted(checks) == ["arena", "canary", "outcome", "planted"]
    elif scenario.expect.load_error is not None:  # the load is refused: no snapshot, no controls to check
        assert sorted(checks) == ["arena", "canary", "outcome", "planted", "state"]
    else:
        assert {"control", "state"} <= set(checks)
    for name in ("planted", "outcome", "canary", "control", "state", "arena"):
        if name in checks:
            assert checks[name].passed, f"{name}: {checks[name].message} (observed: {result.observed})"
    if scenario.calls:  # execution drills: every attempt is in the audit log, nothing of the caller's leaked
        assert checks["audit"].passed, checks["audit"].message
        assert checks["isolation"].passed, checks["isolation"].message
    assert result.passed and result.status == "passed"
