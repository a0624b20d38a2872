"""``tooldir watch``: JSON lines per published snapshot, a readable plain mode, clean exit on signals."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from toolkit import make_tool, project_tools

from tooldir._cli import main

LINE_WAIT_S = 30.0


@contextmanager
def watch_process(tmp_path: Path, *extra: str) -> Iterator[tuple[subprocess.Popen[str], queue.Queue[str]]]:
    project = tmp_path / "proj"
    project_tools(project)
    cmd = [sys.executable, "-m", "tooldir", "watch", "--project", str(project), "--user-dir", str(tmp_path / "user")]
    cmd += ["--state-dir", str(tmp_path / "state"), "--debounce-ms", "10", *extra]
    # the plain summary honours COLUMNS (a CI runner may export COLUMNS=80): these tests read whole
    # lines, so the child gets no COLUMNS and draws unwrapped. The environment is Python's view: a
    # library that ran curses' setupterm in this process may have put COLUMNS into the C one only.
    env = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put("")  # end of output

    reader = threading.Thread(target=pump, name="watch-cli-reader")
    reader.start()
    try:
        yield proc, lines
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(LINE_WAIT_S)
        reader.join(LINE_WAIT_S)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def next_json(lines: queue.Queue[str]) -> dict[str, object]:
    value: dict[str, object] = json.loads(lines.get(timeout=LINE_WAIT_S))
    return value


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_json_mode_writes_one_line_per_snapshot_and_exits_cleanly_on_a_signal(
    tmp_path: Path, sig: signal.Signals
) -> None:
    user = tmp_path / "user"
    make_tool(user, "alpha")
    with watch_process(tmp_path, "--json") as (proc, lines):
        first = next_json(lines)
        assert first["event"] == "snapshot"
        assert first["snapshot"]["generation"] == 1  # type: ignore[index]
        assert [t["name"] for t in first["diff"]["added"]] == ["alpha"]  # type: ignore[index]
        make_tool(user, "beta")
        second = next_json(lines)
        assert second["snapshot"]["generation"] == 2  # type: ignore[index]
        assert second["previous_generation"] == 1
        assert [t["name"] for t in second["diff"]["added"]] == ["beta"]  # type: ignore[index]
        assert second["counts"] == {"active": 2, "pending": 0, "shadowed": 0, "rejected": 0}
        proc.send_signal(sig)
        assert proc.wait(LINE_WAIT_S) == 0
        assert proc.stderr is not None
        assert "Traceback" not in proc.stderr.read()


def test_plain_mode_prints_a_readable_summary_with_terminal_controls_made_visible(tmp_path: Path) -> None:
    user = tmp_path / "user"
    make_tool(user, "alpha")
    with watch_process(tmp_path) as (proc, lines):
        assert "generation 1" in lines.get(timeout=LINE_WAIT_S)
        assert "+ alpha" in lines.get(timeout=LINE_WAIT_S)
        (user / "evil\x1b[2J").mkdir()  # an escape sequence in a folder name must not reach the terminal raw
        summary = lines.get(timeout=LINE_WAIT_S)
        assert "generation 2" in summary
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(LINE_WAIT_S) == 0
        rest = "".join(iter(lambda: lines.get(timeout=LINE_WAIT_S), ""))  # until EOF is signalled below
    assert "\x1b" not in summary + rest
    assert "+ evil<U+001B>[2J" in summary + rest  # reported with the escape made visible, not left out


def test_a_bad_debounce_value_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["watch", "--debounce-ms", "-5"]) == 2
    assert "--debounce-ms" in capsys.readouterr().err


def test_plain_mode_names_the_error_codes_and_counts_in_english(tmp_path: Path) -> None:
    user = tmp_path / "user"
    make_tool(user, "alpha")
    broken = user / "broken"
    broken.mkdir(parents=True)
    (broken / "schema.json").write_text("{")
    with watch_process(tmp_path) as (_proc, lines):
        head = lines.get(timeout=LINE_WAIT_S)  # the process is killed on leaving the block
    assert "generation 1" in head
    assert "1 tool offered," in head
    assert head.rstrip().endswith("1 error (invalid-json)")
