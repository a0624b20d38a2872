"""Issue 17 item 6: progress is drawn on stderr only when stderr is a terminal; messages are never
wrapped when it is not; ``--json`` output does not change."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
from pathlib import Path
from typing import Any

from plaininstall import PlainInstall

LONG = "/nonexistent/" + "/".join(f"folder-number-{i}" for i in range(12))


def _labelled_set(folder: Path) -> tuple[Path, Path]:
    tools, queries = folder / "tools.jsonl", folder / "queries.jsonl"
    rows = [{"name": f"tool_{i}", "description": f"does thing {i} with widgets", "input_schema": {}} for i in range(30)]
    tools.write_text("".join(json.dumps(r) + "\n" for r in rows))
    asks = [{"query": f"thing {i} widgets", "relevant": [f"tool_{i}"]} for i in range(30)]
    queries.write_text("".join(json.dumps(q) + "\n" for q in asks))
    return tools, queries


def _run_with_stderr_on_a_terminal(plain: PlainInstall, argv: list[str], cwd: Path) -> tuple[int, str, bytes]:
    """(exit code, stdout, what reached the terminal) with stderr a pty and stdout a pipe."""
    main, secondary = pty.openpty()
    os.set_inheritable(secondary, True)
    env = dict(plain.env, TERM="xterm-256color", COLUMNS="100")
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=secondary, text=True)
    os.close(secondary)
    seen = bytearray()
    while True:
        ready, _, _ = select.select([main], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the other side closed
            break
        if not chunk:
            break
        seen += chunk
    out, _ = proc.communicate(timeout=60)
    os.close(main)
    return proc.returncode, out, bytes(seen)


def test_an_error_message_stays_on_one_line_when_stderr_is_not_a_terminal(plain: PlainInstall, elsewhere: Path) -> None:
    done = plain.run([plain.tooldir, "scan", "--project", LONG], elsewhere)
    assert done.returncode == 2
    assert done.stderr == f"tooldir scan: --project {LONG}: not a directory\n"


def test_eval_draws_no_progress_into_a_pipe_and_its_json_is_the_same_on_a_terminal(
    plain: PlainInstall, elsewhere: Path
) -> None:
    tools, queries = _labelled_set(elsewhere)
    argv = [plain.tooldir, "eval", "--tools", tools.name, "--queries", queries.name, "--json"]
    piped = plain.run(argv, elsewhere)
    assert piped.returncode == 0, piped.stderr
    assert piped.stderr == ""
    code, out, terminal = _run_with_stderr_on_a_terminal(plain, argv, elsewhere)
    assert code == 0, terminal
    assert json.loads(out) == json.loads(piped.stdout)
    assert json.loads(out)["n"] == 30


def test_eval_shows_progress_on_stderr_when_it_is_a_terminal(plain: PlainInstall, elsewhere: Path) -> None:
    tools, queries = _labelled_set(elsewhere)
    argv = [plain.tooldir, "eval", "--tools", str(tools), "--queries", str(queries)]
    code, out, terminal = _run_with_stderr_on_a_terminal(plain, argv, elsewhere)
    assert code == 0, terminal
    assert b"searching" in terminal  # the progress bar's label
    assert "recall@5" in out and "searching" not in out


def test_progress_imports_rich_progress_only_when_it_draws(plain: PlainInstall, elsewhere: Path) -> None:
    code = (
        "import sys; from tooldir._cli.progress import progress\n"
        "with progress('x', total=3) as t: t.advance()\n"
        "print('rich.progress' in sys.modules)"
    )
    done = plain.run([str(plain.bin / "python"), "-c", code], elsewhere)
    assert done.stdout == "False\n", done.stderr


def test_drill_shows_progress_on_a_terminal_and_prints_the_same_json_as_into_a_pipe(
    plain: PlainInstall, elsewhere: Path
) -> None:
    argv = [plain.tooldir, "drill", "--only", "fs:prefix", "--json"]
    piped = plain.run(argv, elsewhere)
    assert piped.returncode == 0, piped.stderr
    assert piped.stderr == ""
    code, out, terminal = _run_with_stderr_on_a_terminal(plain, argv, elsewhere)
    assert code == 0, terminal
    assert b"drills" in terminal  # the progress bar's label
    assert _untimed(json.loads(out)) == _untimed(json.loads(piped.stdout))


def _untimed(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The drills of a report without what differs between two runs: their durations."""
    return [
        {k: re.sub(r"\d+\.\d+ s\b", "… s", json.dumps(v)) for k, v in d.items() if k != "seconds"}
        for d in report["drills"]
    ]
