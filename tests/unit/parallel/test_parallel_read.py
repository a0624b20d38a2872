"""Parallel reading of large roots (tooldir._internal.forkpool), as the CLI and a host configure
it; the cases that fork are in forked_cases.py, run here in a new single-threaded interpreter."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tooldir._internal import forkpool
from tooldir.snapshot.loader import make_config

CASES = Path(__file__).with_name("forked_cases.py")


def test_the_fork_cases_pass_in_a_new_single_threaded_interpreter() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(CASES)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=CASES.parents[3],
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    summary = proc.stdout.strip().splitlines()[-1]  # e.g. "22 passed in 3.10s": nothing failed or skipped
    found = re.fullmatch(r"(\d+) passed in [\d.]+s(?: \([\d:]+\))?", summary.strip("= "))
    assert found is not None and int(found.group(1)) >= 17, summary


def test_one_shot_cli_loads_may_use_every_cpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tooldir._cli import progress

    seen: list[int] = []

    class Spy:
        def __init__(self, config: Any) -> None:
            seen.append(config.workers)

        def load(self) -> None:
            return None

    monkeypatch.setattr("tooldir.snapshot.loader.Loader", Spy)
    config = make_config(project=None, user_dirs=[tmp_path], state_dir=tmp_path / "s")
    progress.load_roots(config)
    monkeypatch.setenv("TOOLDIR_WORKERS", "1")
    progress.load_roots(config)
    assert seen == [forkpool.cpu_count(), 1]


@pytest.mark.parametrize("value", ["0", "two", "-1", "1.5"])
def test_a_bad_worker_count_in_the_environment_is_a_usage_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    from tooldir._cli import main

    monkeypatch.setenv("TOOLDIR_WORKERS", value)
    code = main(
        ["scan", "--json", "--project", str(tmp_path), "--user-dir", str(tmp_path), "--state-dir", str(tmp_path / "s")]
    )
    assert code == 2
    assert "TOOLDIR_WORKERS" in capsys.readouterr().err


def test_the_loading_line_on_a_terminal_leaves_this_process_one_thread_when_the_load_may_fork(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tooldir._cli import progress

    # the threads of this test process that other tests left are not the loading line's: what
    # load_roots must not add is a thread of its own alive while the load may fork (the CLI's
    # process has no others; the fork cases themselves run in a new interpreter, above)
    before = set(threading.enumerate())
    added: list[list[str]] = []

    class Spy:
        def __init__(self, config: Any) -> None:
            self.workers = config.workers

        def load(self) -> None:
            added.append([t.name for t in threading.enumerate() if t not in before])

    monkeypatch.setattr("tooldir.snapshot.loader.Loader", Spy)
    monkeypatch.setattr(progress, "stderr_is_terminal", lambda: True)
    config = make_config(project=None, user_dirs=[tmp_path], state_dir=tmp_path / "s")
    monkeypatch.setenv("TOOLDIR_WORKERS", "2")
    progress.load_roots(config)
    assert added == [[]]


@pytest.mark.parametrize("workers", [0, -2, 1.5, True])
def test_a_worker_count_that_is_not_a_positive_number_is_refused_by_make_config(tmp_path: Path, workers: Any) -> None:
    with pytest.raises(ValueError, match="workers"):
        make_config(project=None, user_dirs=[tmp_path], state_dir=tmp_path / "s", workers=workers)
