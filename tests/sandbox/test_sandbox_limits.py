"""The rlimits reach the tool whichever way they are set: on the held sandbox with ``prlimit(2)``
(tooldir's own uid, or CAP_SYS_RESOURCE) or through the ``prlimit`` binary (root without
CAP_SYS_RESOURCE, a set-id bubblewrap, a systemd scope); a failure to set them never runs the tool."""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

import pytest
from toolkit import make_tool

from tooldir.policy import Policy
from tooldir.run.registry import Registry
from tooldir.sandbox import BubblewrapSandbox, bubblewrap, process
from tooldir.snapshot.loader import Loader, make_config
from tooldir.snapshot.store import SnapshotStore

pytestmark = pytest.mark.serial  # rlimits and cgroup limits: never beside another such test

LIMITS = """\
import json, resource, sys
json.load(sys.stdin)
names = ["NPROC", "AS", "FSIZE", "CPU", "CORE", "NOFILE", "MEMLOCK", "MSGQUEUE"]
print(json.dumps({"ok": True, "content": {n: resource.getrlimit(getattr(resource, "RLIMIT_" + n)) for n in names}}))
"""


def registry_for(tmp_path: Path, script: str, policy: Policy) -> Registry:
    user = tmp_path / "user"
    make_tool(user, "limits_tool", script=script)
    state = tmp_path / "state"
    config = make_config(project=None, user_dirs=[user], policy=policy, state_dir=state)
    return Registry(SnapshotStore(Loader(config).load()), policy=policy, state_dir=state)


def expected(policy: Policy, box: BubblewrapSandbox) -> dict[str, list[int]]:
    bounded = box.memory_bound != "rlimit+seccomp"
    wanted = process.run_limits(policy.sandbox, box.identity.effective_uid, address_space=None if bounded else -1)
    names = {
        resource.RLIMIT_NPROC: "NPROC",
        resource.RLIMIT_AS: "AS",
        resource.RLIMIT_FSIZE: "FSIZE",
        resource.RLIMIT_CPU: "CPU",
        resource.RLIMIT_CORE: "CORE",
        resource.RLIMIT_NOFILE: "NOFILE",
        resource.RLIMIT_MEMLOCK: "MEMLOCK",
        resource.RLIMIT_MSGQUEUE: "MSGQUEUE",
    }
    return {names[x.which]: [x.soft, x.hard] for x in wanted}


@pytest.mark.usefixtures("sandbox_ready")
@pytest.mark.parametrize("direct", [True, False], ids=["prlimit(2) on the held sandbox", "prlimit binary"])
@pytest.mark.parametrize("bound", ["default", "rlimit+seccomp"])
def test_every_rlimit_of_the_policy_reaches_the_tool_whichever_way_it_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direct: bool, bound: str
) -> None:
    policy = Policy() if bound == "default" else Policy.model_validate({"sandbox": {"memory_bound": bound}})
    registry = registry_for(tmp_path, LIMITS, policy)
    box = registry.sandbox()
    assert isinstance(box, BubblewrapSandbox)
    if direct and not process.may_limit_running(bubblewrap.find_bwrap() or "/", box.identity):
        pytest.skip("the kernel lets this uid set another uid's rlimits only with CAP_SYS_RESOURCE")
    monkeypatch.setattr(process, "may_limit_running", lambda executable, identity: direct)
    used: list[int] = []
    real = process.set_limits
    monkeypatch.setattr(process, "set_limits", lambda pid, limits: (used.append(pid), real(pid, limits)))
    result = registry.call("limits_tool", {"text": "x"})
    assert result.ok, result.error
    want = expected(policy, box)
    got = result.content
    assert got["NPROC"][0] == got["NPROC"][1] >= policy.sandbox.max_processes  # counted from the uid's tasks
    assert got["NOFILE"][0] == got["NOFILE"][1] >= want["NOFILE"][1]  # 256 + the fds bubblewrap is handed
    for counted in ("NPROC", "NOFILE"):
        del got[counted], want[counted]
    assert got == want
    assert len(used) == (2 if direct else 0)  # the launcher and the sandbox's init, or neither


@pytest.mark.usefixtures("sandbox_ready")
def test_a_sandbox_whose_rlimits_cannot_be_set_is_never_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = registry_for(tmp_path, LIMITS, Policy())
    monkeypatch.setattr(process, "may_limit_running", lambda executable, identity: True)
    released: list[object] = []
    real_collect = bubblewrap.collect
    monkeypatch.setattr(bubblewrap, "collect", lambda *a, **k: (released.append(a), real_collect(*a, **k))[1])

    def refuse(pid: int, limits: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(process, "set_limits", refuse)
    result = registry.call("limits_tool", {"text": "x"})
    assert result.error is not None and result.error.code == "sandbox-failed"
    assert result.content is None
    assert released == []  # the held sandbox was killed, never released to start the tool
    box = registry.sandbox()
    assert isinstance(box, BubblewrapSandbox)
    box._spares.close()


def host_status(pid: int) -> dict[str, list[str]]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {k: fields[k].split() for k in ("Uid", "Gid", "Groups", "CapPrm", "CapEff", "CapAmb")}


@pytest.mark.usefixtures("sandbox_ready")
@pytest.mark.parametrize("setpriv", [True, False], ids=["through setpriv", "switched by Popen"])
def test_bubblewrap_started_by_root_runs_as_run_as_uid_with_no_groups_and_no_capabilities(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setpriv: bool
) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root starts bubblewrap as another uid (sandbox.run_as_uid)")
    if not setpriv:
        monkeypatch.setattr(process, "find_setpriv", lambda: None)
    registry = registry_for(tmp_path, LIMITS, Policy())
    box = registry.sandbox()
    assert isinstance(box, BubblewrapSandbox)
    for _ in range(2):
        assert registry.call("limits_tool", {"text": "x"}).ok
    deadline = time.monotonic() + 20
    while not box._spares.held() and time.monotonic() < deadline:
        time.sleep(0.01)
    [spare] = box._spares.held()
    uid = str(Policy().sandbox.run_as_uid)
    started = spare.launched.proc.args
    status = host_status(spare.launched.proc.pid)  # the held launcher, as the host sees it
    box._spares.close()
    assert status["Uid"] == [uid] * 4 and status["Gid"] == [uid] * 4
    assert status["Groups"] == []
    assert isinstance(started, list) and (started[0] == process.find_setpriv()) is setpriv
    assert {int(status[k][0], 16) for k in ("CapPrm", "CapEff", "CapAmb")} == {0}
