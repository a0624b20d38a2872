"""A plain (non-editable) install ships the drill scenarios, the presets and the threat list (issue 12).

Builds a wheel from a copy of this tree, installs it with ``--no-deps`` into a fresh virtualenv
(the test environment's site-packages lend it the dependencies through a ``.pth`` line, so no
index is needed), and runs ``tooldir drill`` from an unrelated folder. The build itself needs no
index when this environment's setuptools satisfies ``[build-system] requires`` (the ``test`` extra
installs it); otherwise pip builds in an isolated environment as usual.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tooldir.drill import load_scenarios

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tooldir" / "_data"


def run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


def backend_is_here() -> bool:
    """Whether this environment satisfies ``[build-system] requires`` (then the build needs no index)."""
    wanted = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["build-system"]["requires"]
    for text in wanted:
        requirement = Requirement(text)
        try:
            if not requirement.specifier.contains(version(requirement.name), prereleases=True):
                return False
        except PackageNotFoundError:
            return False
    return True


def build_wheel(tmp: Path) -> Path:
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "MANIFEST.in", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(REPO / "tooldir", src / "tooldir", symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp / "dist"
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)]
    if backend_is_here():
        argv.append("--no-build-isolation")  # offline and fast: this environment's setuptools
    done = run(argv, tmp)
    assert done.returncode == 0, done.stderr[-3000:]
    [wheel] = out.glob("tooldir-*.whl")
    return wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, dict[str, str]]]:
    """(wheel, the fresh venv's bin folder, an environment for it) with the wheel installed."""
    tmp = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(tmp)
    venv = tmp / "venv"
    done = run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp)
    assert done.returncode == 0, done.stderr
    python = venv / "bin" / "python"
    done = run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        tmp,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    purelib = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp).stdout.strip()
    # the dependencies, from this environment; a .pth line adds a path without running that
    # folder's own .pth files, so this checkout's editable install stays out of the fresh venv
    Path(purelib, "zz_test_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    home = tmp / "home"
    home.mkdir()
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
    yield wheel, venv / "bin", env


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
