"""A crash or an OS error in the middle of ``tooldir allow`` (issue 23 item 10): the approvals file
is the old one or the new one, never torn or lost; the CLI says what failed in one line."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tooldir._cli import main
from tooldir._internal import atomic

TOOL = {
    "name": "echo",
    "description": "Echo the text back.",
    "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}, "additionalProperties": False},
    "risk": "read",
    "execute": {"command": ["python3", "run.py"], "timeout_s": 10, "network": False, "env": []},
}


def project_tool(tmp_path: Path) -> Path:
    package = tmp_path / "project" / ".tooldir" / "tools" / "echo"
    package.mkdir(parents=True)
    (package / "schema.json").write_text(json.dumps(TOOL))
    (package / "run.py").write_text("print('hi')\n")
    return package


def test_a_failed_rename_during_allow_keeps_the_old_approvals_and_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    package = project_tool(tmp_path)
    state = tmp_path / "state"
    monkeypatch.chdir(package.parents[2])
    assert main(["allow", str(package), "--yes", "--json", "--state-dir", str(state)]) == 0
    before = (state / "approvals.json").read_bytes()
    capsys.readouterr()
    (package / "run.py").write_text("print('changed')\n")

    def eio(src: str, dst: str) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO), str(dst))

    monkeypatch.setattr(atomic.os, "replace", eio)
    code = main(["allow", str(package), "--yes", "--json", "--state-dir", str(state)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines() == [f"tooldir allow: Input/output error (errno 5): {state / 'approvals.json'}"]
    assert (state / "approvals.json").read_bytes() == before  # the old approval is intact
    assert sorted(p.name for p in state.iterdir() if p.name.startswith(".approvals")) == []  # no temp left


def test_allow_killed_before_its_rename_leaves_the_old_approvals_and_the_next_allow_works(tmp_path: Path) -> None:
    package = project_tool(tmp_path)
    state = tmp_path / "state"
    cwd = package.parents[2]
    first = subprocess.run(
        [sys.executable, "-m", "tooldir", "allow", str(package), "--yes", "--json", "--state-dir", str(state)],
        cwd=cwd,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert first.returncode == 0, first.stderr
    before = (state / "approvals.json").read_bytes()
    (package / "run.py").write_text("print('changed')\n")
    # the process dies (SIGKILL) after writing and syncing the temp file, before the rename
    killer = (
        "import os, signal, sys\n"
        "from tooldir._internal import atomic\n"
        "atomic.os.replace = lambda src, dst: os.kill(os.getpid(), signal.SIGKILL)\n"
        "from tooldir._cli import main\n"
        f"sys.exit(main(['allow', {str(package)!r}, '--yes', '--json', '--state-dir', {str(state)!r}]))\n"
    )
    killed = subprocess.run([sys.executable, "-c", killer], cwd=cwd, capture_output=True, timeout=120, check=False)
    assert killed.returncode == -signal.SIGKILL
    assert (state / "approvals.json").read_bytes() == before
    again = subprocess.run(
        [sys.executable, "-m", "tooldir", "allow", str(package), "--yes", "--json", "--state-dir", str(state)],
        cwd=cwd,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert again.returncode == 0, again.stderr
    approvals = json.loads((state / "approvals.json").read_text())["approvals"]
    assert list(approvals) == [str(package)]
    assert json.loads(again.stdout)["approved"]["digest"] != json.loads(first.stdout)["approved"]["digest"]
