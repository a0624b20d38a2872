"""A plain (non-editable) install ships the drill scenarios, the presets and the threat list (issue 12).

Builds a wheel from a copy of this tree and installs it with ``--no-deps`` into a fresh virtualenv
(tests/plaininstall.py: the test environment's site-packages lend it the dependencies through a
``.pth`` line, so no index is needed), and runs ``tooldir drill`` from an unrelated folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from plaininstall import install_wheel

from tooldir.drill import load_scenarios

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tooldir" / "_data"


def run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, dict[str, str]]]:
    """(wheel, the fresh venv's bin folder, an environment for it) with the wheel installed
    (tests/plaininstall.py, as the issue-17 tests install it)."""
    plain = install_wheel(tmp_path_factory.mktemp("wheel"))
    yield plain.wheel, plain.bin, plain.env


def test_the_wheel_holds_every_scenario_preset_and_the_threat_list(
    installed: tuple[Path, Path, dict[str, str]],
) -> None:
    wheel, _, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {str(p.relative_to(REPO)) for p in DATA.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert any("/.tooldir/" in n for n in expected)  # dot-folders are what setuptools' globs miss
    assert sorted(expected - names) == []


def test_an_installed_wheel_lists_and_runs_the_bundled_drills_from_an_unrelated_folder(
    installed: tuple[Path, Path, dict[str, str]], tmp_path: Path
) -> None:
    _, bin_dir, env = installed
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = run([str(bin_dir / "python"), "-c", "import tooldir; print(tooldir.__file__)"], elsewhere, env)
    assert Path(where.stdout.strip()).is_relative_to(bin_dir.parent), where.stdout + where.stderr  # the wheel's copy

    listed = run([str(bin_dir / "tooldir"), "drill", "--list", "--json"], elsewhere, env)
    assert listed.returncode == 0, listed.stderr[-3000:]
    ids = [row["id"] for row in json.loads(listed.stdout)["drills"]]
    assert ids == [s.drill_id for s in load_scenarios(DATA / "scenarios")]

    done = run([str(bin_dir / "tooldir"), "drill", "--only", "fs:prefix", "--json"], elsewhere, env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [drill] = json.loads(done.stdout)["drills"]
    assert drill["status"] == "passed"
    planted = next(d for d in drill["details"] if d["check"] == "planted")
    assert planted["passed"] is True and not planted["message"].startswith("the scenario plants nothing")
    presets = run(
        [
            str(bin_dir / "python"),
            "-c",
            "from tooldir._data import PRESETS, THREATS; print(sorted(p.name for p in PRESETS.iterdir()), THREATS.is_file())",
        ],
        elsewhere,
        env,
    )
    assert presets.stdout.strip() == f"{sorted(p.name for p in (DATA / 'policies').iterdir())} True"
    assert os.listdir(elsewhere) == []  # nothing written into the working directory
