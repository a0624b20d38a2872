"""A ``python-m-tooldir`` step's ``max_rss_mb``: the child's own peak resident memory (sarif:bomb)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from tooldir._cli import command_line
from tooldir.drill import Step, load_scenario, run_drill
from tooldir.drill.execute import _run_measured

HEADER = """
threat = "sarif:bomb"
title = "t"
plants = "p"
expected = "e"

[control]
user = ["good_user_tool"]
project = ["good_project_tool"]
"""


def test_the_peak_measured_is_the_childs_own_and_covers_what_it_held(tmp_path: Path) -> None:
    hold = "b = bytearray(96 * 1024 * 1024); b[::4096] = b'x' * len(b[::4096]); print('held')"
    code, out, err, peak_kib = _run_measured([sys.executable, "-c", hold], tmp_path)
    assert (code, out, err) == (0, b"held\n", b"")
    assert peak_kib >= 96 * 1024
    code, _, _, small_kib = _run_measured([sys.executable, "-c", "pass"], tmp_path)
    assert code == 0 and small_kib < 96 * 1024  # not the largest earlier child's peak


def test_a_child_that_outlives_the_cap_is_killed_and_reported_unfinished(tmp_path: Path) -> None:
    code, _, _, _ = _run_measured([sys.executable, "-c", "import signal; signal.pause()"], tmp_path, 0.5)
    assert code is None


def _drill(tmp_path: Path, body: str):  # type: ignore[no-untyped-def]
    folder = tmp_path / "scenarios" / "sarif-bomb"
    folder.mkdir(parents=True)
    (folder / "scenario.toml").write_text(HEADER + textwrap.dedent(body))
    return run_drill(load_scenario(folder), cli=command_line())


def test_a_step_over_its_memory_bound_fails_the_drill_naming_the_step_and_the_peak(tmp_path: Path) -> None:
    result = _drill(tmp_path, '[[steps]]\ndo = "python-m-tooldir"\nargs = ["scan", "--json"]\nmax_rss_mb = 1\n')
    assert result.status == "failed"
    [check] = result.checks
    assert "steps[0] (python-m-tooldir): 'python3 -m tooldir scan' peaked at " in check.message, check.message
    assert "MiB resident, over its bound of 1 MiB" in check.message


def test_a_step_within_its_memory_bound_passes(tmp_path: Path) -> None:
    result = _drill(tmp_path, '[[steps]]\ndo = "python-m-tooldir"\nargs = ["scan", "--json"]\nmax_rss_mb = 1024\n')
    assert result.status == "passed", result.checks


def test_max_rss_mb_is_only_for_a_process_step() -> None:
    with pytest.raises(ValidationError, match="max_rss_mb is measured only for a 'python-m-tooldir' step"):
        Step(do="tooldir", args=("scan",), max_rss_mb=10)
