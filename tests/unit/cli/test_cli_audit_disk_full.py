"""``tooldir run`` on a full state dir (issue 23 item 10): exit 3, one line naming the code, the
error and the log, no traceback; the tool never started; ``audit verify`` is clean once space is back."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = {
    "name": "echo",
    "description": "Echo the text back.",
    "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}, "additionalProperties": False},
    "risk": "read",
    "execute": {"command": ["python3", "run.py"], "timeout_s": 10, "network": False, "env": []},
}
RUN = 'import json, sys\nprint(json.dumps({"ok": True, "content": json.load(sys.stdin)["input"]}))\n'


def tooldir(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tooldir", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "400"},
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs (a real full disk) needs root")
def test_run_on_a_full_state_dir_exits_3_with_one_line_and_the_log_verifies_once_space_is_back(tmp_path: Path) -> None:
    user = tmp_path / "user"
    (user / "echo").mkdir(parents=True)
    (user / "echo" / "schema.json").write_text(json.dumps(TOOL))
    (user / "echo" / "run.py").write_text(RUN)
    disk = tmp_path / "disk"
    disk.mkdir()
    project = tmp_path / "project"
    project.mkdir()
    state = disk / "state"
    common = ["--user-dir", str(user), "--state-dir", str(state)]
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tooldir-cli-full", str(disk)], check=True)
    try:
        first = tooldir("run", "echo", "--input", '{"text": "a"}', "--json", *common, cwd=project)
        assert first.returncode == 0, first.stderr
        with open(disk / "filler", "wb", buffering=0) as fh:
            for size in (1 << 16, 4096, 1):
                with contextlib.suppress(OSError):
                    while True:
                        fh.write(b"\0" * size)
        full = tooldir("run", "echo", "--input", '{"text": "b"}', *common, cwd=project)
        assert full.returncode == 3
        assert "Traceback" not in full.stderr + full.stdout
        (line,) = [x for x in (full.stdout + full.stderr).splitlines() if x.startswith("error ")]
        assert line.startswith("error audit-unavailable: the audit log cannot take this call's line, so the tool")
        assert "No space left on device" in line and str(state / "audit.jsonl") in line
        (disk / "filler").unlink()
        verified = tooldir("audit", "verify", "--state-dir", str(state), "--json", cwd=project)
        assert verified.returncode == 0 and json.loads(verified.stdout)["ok"] is True, verified.stdout
        again = tooldir("run", "echo", "--input", '{"text": "c"}', "--json", *common, cwd=project)
        assert again.returncode == 0 and json.loads(again.stdout)["content"] == {"text": "c"}
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
