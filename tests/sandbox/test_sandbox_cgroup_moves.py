"""The cgroup hand-over with less waiting (issue 14 item 8): the grace period the first move into a
cgroup waits for is started as soon as the run's cgroup exists, by moving one thread of ours into
the cgroup it already is in, so it passes while the run is set up -- with every guarantee of the
hand-over kept: no tool code runs outside the run's cgroup, a failed move fails the run closed
before the tool starts, and nothing of tooldir is ever moved anywhere else."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from test_sandbox_cgroup_v1 import INSIDE, V1_ROOT, registry_with

from tooldir.policy import Policy
from tooldir.sandbox import BubblewrapSandbox, bubblewrap, cgroup

pytestmark = pytest.mark.serial  # cgroups: never beside another such test


def test_warming_moves_names_only_the_calling_thread_and_only_in_our_own_cgroup(tmp_path: Path) -> None:
    (tmp_path / "tasks").write_text("")
    (tmp_path / "cgroup.procs").write_text("")
    cgroup.warm_moves(cgroup.V1Parents(tmp_path, None))
    assert (tmp_path / "tasks").read_text() == str(threading.get_native_id())
    assert (tmp_path / "cgroup.procs").read_text() == ""  # never the whole process


def test_warming_moves_where_the_tasks_file_cannot_be_written_is_a_silent_no_op(tmp_path: Path) -> None:
    cgroup.warm_moves(cgroup.V1Parents(tmp_path / "gone", None))  # no exception: just no head start


class RefusingGroup:
    """A run cgroup whose moves fail (e.g. the cgroup was removed under us)."""

    def __init__(self, path: Path, refuse: str) -> None:
        self.path = path
        self.refuse = refuse  # "first" (the launcher's move) or "second" (the init's)
        self.added: list[int] = []
        self.closed = False

    def add(self, pid: int) -> None:
        self.added.append(pid)
        if self.refuse == "first" or len(self.added) > 1:
            raise OSError(16, "Device or resource busy")

    def oom_killed(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


@pytest.mark.usefixtures("sandbox_ready")
@pytest.mark.parametrize("refuse", ["first", "second"])
def test_a_failed_move_of_the_launcher_or_of_the_init_fails_the_run_closed_before_the_tool_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refuse: str
) -> None:
    bound = bubblewrap.Bound("cgroup-v1", v1=cgroup.V1Parents(tmp_path / "v1", None))
    box = BubblewrapSandbox(Policy().sandbox, tmp_path / "state", bound=bound)
    groups: list[RefusingGroup] = []

    def make_group() -> Any:
        groups.append(RefusingGroup(tmp_path / "run-cgroup", refuse))
        return groups[-1]

    monkeypatch.setattr(box, "_cgroup", make_group)
    canary = tmp_path / "ran"
    script = f"import json, sys\njson.load(sys.stdin)\nopen({str(canary)!r}, 'w')\n"
    result = registry_with(tmp_path, Policy(), sandbox=box, script=script).call("probe_tool", {"text": "x"})
    assert result.error is not None and result.error.code == "sandbox-failed"
    assert "run-cgroup" in result.error.message
    assert not canary.exists()
    assert 1 <= len(groups) <= 2  # the set-up made ahead at the call's start, then the run's own
    for group in groups:
        assert group.closed
        assert len(group.added) == (1 if refuse == "first" else 2)


def own_memory_line() -> str:
    return next(line for line in Path("/proc/self/cgroup").read_text().splitlines() if ":memory:" in line)


@pytest.mark.usefixtures("sandbox_ready")
@V1_ROOT
def test_after_warmed_runs_tooldir_is_still_in_its_own_cgroup_and_every_tool_ran_inside_its_run_cgroup(
    tmp_path: Path,
) -> None:
    before = own_memory_line()
    registry = registry_with(tmp_path, Policy(), script=INSIDE)
    for _ in range(3):
        result = registry.call("probe_tool", {"text": "x"})
        assert result.ok, result.error
        line = next(entry for entry in result.content["cgroups"] if ":memory:" in entry)
        assert line.rsplit("/", 1)[-1].startswith("tooldir-")  # the tool's first look: already inside
    assert own_memory_line() == before
