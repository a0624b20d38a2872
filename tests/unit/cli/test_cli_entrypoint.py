"""exec:entrypoint: ``python3 -m tooldir`` inside a project never imports a module the project plants."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from toolkit import make_tool

from tooldir._internal.safepath import drop_working_directory, module_run, runs_tooldir

#: Modules tooldir (or the interpreter on its behalf) imports after ``-m`` has put the cwd first.
PLANTED = ("rich", "anyio", "jsonschema", "pydantic", "mcp", "watchdog", "cryptography", "json", "dataclasses")


def plant(project: Path, canary: Path) -> None:
    for name in PLANTED:
        (project / f"{name}.py").write_text(f"open({str(canary / name)!r}, 'w').write('imported')\n")


def python_m(project: Path, *args: str, stdin: int | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "tooldir", *args],
        cwd=project,
        capture_output=True,
        timeout=120,
        check=False,
        stdin=stdin,
    )


@pytest.fixture
def planted(tmp_path: Path) -> tuple[Path, Path, Path]:
    project, canary, user = tmp_path / "project", tmp_path / "canary", tmp_path / "user"
    project.mkdir()
    canary.mkdir()
    make_tool(user, "good_tool")
    plant(project, canary)
    return project, canary, user


def test_python_m_tooldir_scan_in_a_project_with_planted_modules_imports_none_of_them(
    planted: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    project, canary, user = planted
    done = python_m(project, "scan", "--json", "--user-dir", str(user), "--state-dir", str(tmp_path / "s"))
    assert sorted(p.name for p in canary.iterdir()) == []
    assert done.returncode == 0, done.stderr
    tools = json.loads(done.stdout)["tools"]
    assert [(t["name"], t["status"]) for t in tools] == [("good_tool", "active")]


def test_python_m_tooldir_serve_in_a_project_with_planted_modules_imports_none_of_them(
    planted: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    project, canary, user = planted
    args = ("serve", "--no-watch", "--user-dir", str(user), "--state-dir", str(tmp_path / "s"))
    done = python_m(project, *args, stdin=subprocess.DEVNULL)  # the client hangs up at once
    assert sorted(p.name for p in canary.iterdir()) == []
    assert done.returncode == 0, done.stderr


def test_a_host_run_with_python_m_that_imports_tooldir_keeps_its_working_directory_on_sys_path(
    tmp_path: Path,
) -> None:
    host = tmp_path / "host"
    (host / "hostapp").mkdir(parents=True)
    (host / "hostapp" / "__init__.py").write_text("import tooldir\nimport helper\n")
    (host / "hostapp" / "__main__.py").write_text("import helper\nprint(helper.VALUE)\n")
    (host / "helper.py").write_text("VALUE = 'host helper'\n")
    done = subprocess.run([sys.executable, "-m", "hostapp"], cwd=host, capture_output=True, timeout=120, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, b"host helper"), done.stderr


@pytest.mark.parametrize(
    ("argv", "module"),
    [
        (["python3", "-m", "tooldir", "scan"], "tooldir"),
        (["python3", "-mtooldir"], "tooldir"),
        (["python3", "-Im", "tooldir"], "tooldir"),
        (["python3", "-X", "dev", "-W", "error", "-m", "tooldir.__main__"], "tooldir.__main__"),
        (["python3", "-Xm", "-m", "other"], "other"),  # -X takes "m" as its value
        (["python3", "-W", "-m", "-m", "tooldir"], "tooldir"),  # -W takes the next word, even "-m"
        (["python3", "--check-hash-based-pycs", "always", "-m", "tooldir"], "tooldir"),
        (["python3", "-c", "import tooldir", "-m", "tooldir"], None),
        (["python3", "script.py", "-m", "tooldir"], None),
        (["python3"], None),
    ],
)
def test_the_module_named_by_dash_m_is_read_from_the_interpreter_command_line(
    argv: list[str], module: str | None
) -> None:
    assert module_run(argv) == module


def test_only_python_m_tooldir_while_the_package_is_located_counts_as_running_tooldir() -> None:
    assert runs_tooldir(["-m"], ["python3", "-m", "tooldir", "scan"])
    assert not runs_tooldir(["/usr/lib/tooldir/__main__.py"], ["python3", "-m", "tooldir"])  # already running
    assert not runs_tooldir(["-m"], ["python3", "-m", "hostapp"])  # a host's own -m module imports tooldir
    assert not runs_tooldir(["-m"], ["python3", "-m", "tooldirx"])


def test_every_spelling_of_the_working_directory_leaves_sys_path_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    path = ["", str(tmp_path), "/usr/lib/python3/site-packages", ".", f"{tmp_path}/sub/..", "sub"]
    assert drop_working_directory(path) == ["", str(tmp_path), ".", f"{tmp_path}/sub/.."]
    assert path == ["/usr/lib/python3/site-packages", "sub"]
