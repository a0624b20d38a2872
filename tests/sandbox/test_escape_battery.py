"""Hostile tools run for real in the bubblewrap sandbox: every escape must fail and leave the host
untouched. The battery runs in-process as the current user (root in CI), and again in a separate
process as a throwaway unprivileged user."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import battery
import pytest
import unprivileged

pytestmark = pytest.mark.usefixtures("sandbox_ready")

DRIVER = Path(__file__).with_name("drive.py")
DRIVER_TIMEOUT_S = 120


def _host_snapshot(home: Path) -> list[str]:
    return sorted(str(p.relative_to(home)) + ":" + p.read_text() for p in home.rglob("*") if p.is_file())


@pytest.mark.parametrize("attack", sorted(battery.SCRIPTS), ids=lambda a: f"{battery.THREATS[a]}/{a}")
def test_hostile_tool_is_contained_and_the_host_is_untouched(tmp_path: Path, attack: str) -> None:
    root = tmp_path / "tools"
    host = battery.Host(tmp_path, tmp_path / "state")
    home = Path(os.environ["HOME"])
    try:
        battery.build(root, host)
        registry = battery.registry(root, host)
        before = _host_snapshot(home)
        outcome = battery.run_attack(registry, host, attack)
        assert battery.problems(attack, outcome, host) == []
        assert _host_snapshot(home) == before
    finally:
        host.close()


def test_every_sandbox_threat_has_an_attack_in_the_battery() -> None:
    sandbox_threats = {
        "sandbox:secrets",
        "sandbox:network",
        "sandbox:write",
        "sandbox:caps",
        "sandbox:fork",
        "sandbox:flood",
        "sandbox:hang",
        "sandbox:tty",
        "sandbox:vsock",
        "sandbox:memory",
        "sandbox:keyring",
    }
    assert set(battery.THREATS.values()) == sandbox_threats
    assert set(battery.THREATS) == set(battery.SCRIPTS)


# --------------------------------------------------------------------------- as another user


@pytest.fixture
def throwaway_user() -> Iterator[str]:
    if os.geteuid() != 0:
        pytest.skip("already unprivileged: the in-process battery above ran as this user")
    with unprivileged.throwaway_user() as name:
        yield name


def _as_user(user: str, argv: list[str], workdir: Path) -> subprocess.CompletedProcess[bytes]:
    return unprivileged.run_as_user(user, argv, workdir, expose=unprivileged.python_trees(), timeout=DRIVER_TIMEOUT_S)


def test_battery_as_an_unprivileged_user_contains_every_attack(throwaway_user: str) -> None:
    import pwd

    uid = pwd.getpwnam(throwaway_user).pw_uid
    workdir = Path(tempfile.mkdtemp(prefix="tooldir-battery-", dir="/tmp"))
    try:
        os.chmod(workdir, 0o700)
        os.chown(workdir, uid, uid)
        out = workdir / "result.json"
        done = _as_user(throwaway_user, [sys.executable, str(DRIVER), "battery", str(workdir), str(out)], workdir)
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        report = json.loads(out.read_text())
        assert report["uid"] == uid
        assert set(report["problems"]) == set(battery.SCRIPTS)
        assert {a: p for a, p in report["problems"].items() if p} == {}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# --------------------------------------------------------------------------- a real terminal


def test_tiocsti_cannot_inject_into_the_controlling_terminal_of_the_caller(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    try:
        slave_path = os.ttyname(slave)
        out = tmp_path / "tty.json"
        done = subprocess.run(
            [sys.executable, str(DRIVER), "tty", str(tmp_path), str(out), slave_path],
            capture_output=True,
            timeout=DRIVER_TIMEOUT_S,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        report = json.loads(out.read_text())
    finally:
        os.close(master)
        os.close(slave)
    assert report["problems"] == []
    assert report["queued"] == 0  # nothing was pushed into the terminal's input queue
    # the control: outside the sandbox, on this kernel, TIOCSTI does work (or is disabled entirely)
    assert report["control"] == "injected" or report["control"].startswith("blocked outside")
