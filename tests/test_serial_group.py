"""Tests marked ``serial`` really share one xdist worker under ``--dist loadgroup`` (tests/conftest.py).

The group is only honoured if the marker is added before pytest-xdist turns ``xdist_group`` markers into
``@group`` suffixes of the node ids: a conftest hook that runs after it leaves every serial test free to run
beside another one on the other worker.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).parent / "conftest.py"

SUITE = """
import os
from pathlib import Path

import pytest

LOG = Path(os.environ["SERIAL_LOG"])


def record(kind: str) -> None:
    with LOG.open("a", encoding="utf-8") as f:
        f.write(f"{kind} {os.environ['PYTEST_XDIST_WORKER']}\\n")


@pytest.mark.serial
@pytest.mark.parametrize("n", range(4))
def test_serial(n: int) -> None:
    record("serial")


@pytest.mark.parametrize("n", range(4))
def test_free(n: int) -> None:
    record("free")
"""


def test_serial_tests_all_run_on_one_xdist_worker_under_loadgroup(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "test_suite.py").write_text(SUITE, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n  serial: x\n  both_rankers: x\n", encoding="utf-8")
    log = tmp_path / "log"
    env = {**os.environ, "SERIAL_LOG": str(log)}
    env.pop("PYTEST_XDIST_WORKER", None)
    xdist = ["-n", "2", "--dist", "loadgroup"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *xdist, "-p", "no:cacheprovider", "-p", "no:cov"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line.split() for line in log.read_text(encoding="utf-8").splitlines()]
    assert sorted(kind for kind, _ in lines) == ["free"] * 4 + ["serial"] * 4  # every test ran once
    serial_workers = {worker for kind, worker in lines if kind == "serial"}
    assert len(serial_workers) == 1, lines
