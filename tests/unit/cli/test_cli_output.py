"""CLI output (issue 14 item 7): ``--json`` is compact for pipes and indented on a terminal (same
content), and a reader that goes away (``| head -c1``) ends the command quietly."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from toolkit import make_tool

from tooldir._cli import EXIT_BROKEN_PIPE
from tooldir._cli.common import print_json

DOC = {"tools": [{"name": "a", "path": "/tmp/ü"}], "n": 1, "ok": True}


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_json_for_a_pipe_is_one_compact_line(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    print_json(DOC)
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")
    assert json.loads(text) == DOC


def test_json_on_a_terminal_is_indented_with_the_same_content(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _Terminal()
    monkeypatch.setattr(sys, "stdout", out)
    print_json(DOC)
    text = out.getvalue()
    assert '\n  "tools": [' in text
    assert json.loads(text) == DOC


def _tooldir(*args: str, cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tooldir", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "table"])
def test_a_closed_stdout_ends_scan_quietly_with_the_sigpipe_status(tmp_path: Path, root: Path, as_json: bool) -> None:
    make_tool(root, "good_tool")
    args = ["scan", "--user-dir", str(root), "--project", str(tmp_path), "--state-dir", str(tmp_path / "s")]
    with _tooldir(*args, *(["--json"] if as_json else []), cwd=tmp_path) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # the reader is gone before anything is written: every write fails with EPIPE
        stderr = proc.stderr.read()
        assert proc.wait(timeout=120) == EXIT_BROKEN_PIPE, stderr
    assert stderr == b""


def test_scan_json_piped_into_head_prints_no_traceback(tmp_path: Path, root: Path) -> None:
    # a real pipeline (the closed-stdout test above is the one that always hits EPIPE: head may
    # read a single large write whole before it exits)
    for i in range(300):
        make_tool(root, f"tool_{i:03d}")
    script = f'"{sys.executable}" -m tooldir scan --json --user-dir "{root}" --project . --state-dir "{tmp_path / "s"}"'
    done = subprocess.run(
        ["sh", "-c", f"{script} | head -c1"], cwd=tmp_path, capture_output=True, timeout=120, check=False
    )
    assert done.stdout == b"{"
    assert b"Traceback" not in done.stderr and b"BrokenPipe" not in done.stderr
    assert done.stderr == b""


@pytest.mark.parametrize(
    "doc",
    [
        {"tools": [{"name": f"t{i}", "path": "/tmp/ü", "n": [i, None, 1.5]} for i in range(700)], "empty": [], "n": 1},
        {"tools": [{"x": i} for i in range(256)], "more": [{"y": "é"}] * 257},
        [{"a": 1}] * 600,
        {"a": 1},
        {},
        "text",
    ],
    ids=["long-list", "batch-edges", "top-level-list", "small", "empty", "scalar"],
)
def test_compact_json_is_written_in_pieces_with_exactly_the_text_of_one_dumps(doc: object) -> None:
    from tooldir._cli.common import compact_json_chunks

    assert "".join(compact_json_chunks(doc)) == json.dumps(doc, ensure_ascii=False)
