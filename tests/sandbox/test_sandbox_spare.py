"""Spare sandboxes (issue 14 item 8): a tool run again finds its sandbox already set up -- bubblewrap
started, mounts and namespaces made, seccomp loaded, moved into its cgroup -- and held at
``--block-fd``, so its call only releases it. No tool code runs before its call, a spare never
serves another tool or environment, execution still re-reads and re-hashes the verified bytes,
and no spare outlives its sandbox or a killed tooldir."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from toolkit import make_tool

from tooldir.policy import Policy
from tooldir.run.registry import Registry
from tooldir.sandbox import BubblewrapSandbox, bubblewrap
from tooldir.sandbox.store import verified_files
from tooldir.snapshot.loader import Loader, make_config
from tooldir.snapshot.store import SnapshotStore

STARTED = """\
import json, sys, time
started = time.time()
data = json.load(sys.stdin)
print(json.dumps({"ok": True, "content": {"tool": "NAME", "started": started, "input": data["input"]}}))
"""


def registry_for(tmp_path: Path, *names: str, policy: Policy | None = None) -> Registry:
    user = tmp_path / "user"
    for name in names:
        make_tool(user, name, script=STARTED.replace("NAME", name))
    policy = policy or Policy()
    state = tmp_path / "state"
    config = make_config(project=None, user_dirs=[user], policy=policy, state_dir=state)
    return Registry(SnapshotStore(Loader(config).load()), policy=policy, state_dir=state)


def box_of(registry: Registry) -> BubblewrapSandbox:
    box = registry.sandbox()
    assert isinstance(box, BubblewrapSandbox)
    return box


def wait_for_spare(box: BubblewrapSandbox) -> Any:
    """The newest spare held (waiting until there is one)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        held = box._spares.held()
        if held:
            return held[-1]
        time.sleep(0.01)
    pytest.fail("no spare sandbox was made")


def count_prepares(box: BubblewrapSandbox, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The thread of every set-up from scratch (the caller's, or the spare maker's)."""
    threads: list[str] = []
    real = box._prepare

    def prepare(request: Any, **how: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real(request, **how)

    monkeypatch.setattr(box, "_prepare", prepare)
    return threads


def children(spare: Any) -> list[str]:
    """Processes the held sandbox's launcher has started beyond its init (none until released)."""
    pid = spare.launched.proc.pid
    kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [k for k in kids for _ in [0] if Path(f"/proc/{k}/task/{k}/children").read_text().split()]


def seed_copy(registry: Registry, name: str) -> None:
    """The package's verified copy in the state, as an earlier run leaves it (work done ahead, in
    the background, never writes the state itself)."""
    record = registry.store.current.get(name)
    assert record is not None
    verified_files(record, box_of(registry).store_dir)


def wait_gone(pid: int, timeout: float) -> bool:
    """Wait for ``pid`` (not our child: a pidfd, readable once it has ended) to end; whether it did."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
        return bool(ready) or gone(pid)
    finally:
        os.close(fd)


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


@pytest.mark.usefixtures("sandbox_ready")
def test_a_tool_run_again_is_served_by_a_spare_made_ahead_that_had_not_started_the_tool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = registry_for(tmp_path, "probe_tool")
    box = box_of(registry)
    seed_copy(registry, "probe_tool")
    prepares = count_prepares(box, monkeypatch)
    for n in (1, 2):
        assert registry.call("probe_tool", {"text": str(n)}).ok
    spare = wait_for_spare(box)
    # each call's own set-up was made ahead, at its start; a spare after the second run only
    assert prepares == ["tooldir-spare-sandbox"] * 3
    group = spare.group
    time.sleep(0.2)  # a tool that had started early would show a start time before the call
    called_at = time.time()
    result = registry.call("probe_tool", {"text": "3"})
    assert result.ok, result.error
    assert result.content["input"] == {"text": "3"}
    assert result.content["started"] >= called_at
    assert gone(spare.launched.proc.pid) and spare not in box._spares.held()  # it served the call
    assert all(thread == "tooldir-spare-sandbox" for thread in prepares)  # no call set anything up itself
    assert group is None or not group.path.exists()  # the spare's cgroup went with its run
    box._spares.close()


@pytest.mark.usefixtures("sandbox_ready")
def test_a_spare_never_serves_another_tool_and_stays_held_unstarted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = registry_for(tmp_path, "alpha_tool", "beta_tool")
    box = box_of(registry)
    for _ in range(2):
        assert registry.call("alpha_tool", {"text": "a"}).ok
    spare = wait_for_spare(box)
    prepares = count_prepares(box, monkeypatch)
    for _ in range(2):
        result = registry.call("beta_tool", {"text": "b"})
        assert result.ok and result.content["tool"] == "beta_tool"
    assert len(prepares) >= 2  # beta got sandboxes of its own, set up for it
    assert spare in box._spares.held()  # alpha's spare is still waiting, never released
    assert spare.usable() and not children(spare)
    box._spares.close()
    assert gone(spare.launched.proc.pid)


@pytest.mark.usefixtures("sandbox_ready")
def test_a_changed_environment_value_is_never_served_by_a_spare_made_with_the_old_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = tmp_path / "user"
    script = (
        'import json, os, sys\njson.load(sys.stdin)\nprint(json.dumps({"ok": True, "content": os.environ["TOKEN"]}))\n'
    )
    make_tool(user, "env_tool", script=script, execute={"command": ["python3", "run.py"], "env": ["TOKEN"]})
    policy = Policy.model_validate({"sandbox": {"env_allow": ["TOKEN"]}})
    config = make_config(project=None, user_dirs=[user], policy=policy, state_dir=tmp_path / "state")
    registry = Registry(SnapshotStore(Loader(config).load()), policy=policy, state_dir=tmp_path / "state")
    monkeypatch.setenv("TOKEN", "old")
    for _ in range(2):
        assert registry.call("env_tool", {"text": "x"}).content == "old"
    wait_for_spare(box_of(registry))
    monkeypatch.setenv("TOKEN", "new")
    assert registry.call("env_tool", {"text": "x"}).content == "new"
    box_of(registry)._spares.close()


@pytest.mark.usefixtures("sandbox_ready")
def test_a_spare_is_not_run_when_the_verified_bytes_cannot_be_read_again(tmp_path: Path) -> None:
    registry = registry_for(tmp_path, "probe_tool")
    box = box_of(registry)
    for _ in range(2):
        assert registry.call("probe_tool", {"text": "x"}).ok
    spare = wait_for_spare(box)
    record = registry.store.current.get("probe_tool")
    assert record is not None and record.digest is not None
    copy = tmp_path / "state" / "sandbox" / "packages" / record.digest.removeprefix("sha256:")
    for path in sorted(copy.rglob("*"), reverse=True):  # the verified copy is gone ...
        os.chmod(path.parent, 0o700)
        path.unlink() if path.is_file() else path.rmdir()
    (tmp_path / "user" / "probe_tool" / "run.py").write_text("print('swapped')\n")  # ... the package changed
    result = registry.call("probe_tool", {"text": "x"})
    assert result.error is not None and result.error.code == "changed-since-verification"
    deadline = time.monotonic() + 10
    while not gone(spare.launched.proc.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert gone(spare.launched.proc.pid)
    assert spare.group is None or not spare.group.path.exists()


@pytest.mark.usefixtures("sandbox_ready")
def test_spares_go_with_their_sandbox(tmp_path: Path) -> None:
    registry = registry_for(tmp_path, "probe_tool")
    box = box_of(registry)
    for _ in range(2):
        assert registry.call("probe_tool", {"text": "x"}).ok
    spare = wait_for_spare(box)
    box._spares.close()
    assert gone(spare.launched.proc.pid)
    assert spare.group is None or not spare.group.path.exists()
    assert registry.call("probe_tool", {"text": "x"}).ok  # a closed spare pool just makes none


_HOST = """
import json, sys, time
from pathlib import Path
from tooldir.snapshot.loader import Loader, make_config
from tooldir.policy import Policy
from tooldir.run.registry import Registry
from tooldir.snapshot.store import SnapshotStore
policy = Policy()
config = make_config(project=None, user_dirs=[Path(sys.argv[1])], policy=policy, state_dir=Path(sys.argv[2]))
registry = Registry(SnapshotStore(Loader(config).load()), policy=policy, state_dir=Path(sys.argv[2]))
for _ in range(2):
    assert registry.call("probe_tool", {"text": "x"}).ok
box = registry.sandbox()
while not box._spares.held():
    time.sleep(0.01)
spare = box._spares.held()[-1]
print(json.dumps({"launcher": spare.launched.proc.pid, "cgroup": str(spare.group.path) if spare.group else None}), flush=True)
sys.stdin.readline()  # killed meanwhile, or told to end: then the interpreter exits, the registry never closed
"""


@pytest.mark.usefixtures("sandbox_ready")
@pytest.mark.parametrize("end", ["killed", "exits"])
def test_a_tooldir_that_ends_while_a_spare_waits_takes_the_spare_with_it(tmp_path: Path, end: str) -> None:
    """Killed (SIGKILL: bubblewrap's --die-with-parent) or ending normally without closing its
    registry (the interpreter's exit: the spares' finalizer): no held sandbox outlives tooldir."""
    make_tool(tmp_path / "user", "probe_tool", script=STARTED.replace("NAME", "probe_tool"))
    host = subprocess.Popen(
        [sys.executable, "-c", _HOST, str(tmp_path / "user"), str(tmp_path / "state")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert host.stdout is not None and host.stdin is not None
        line = host.stdout.readline()
        assert line, "the host process never reported its spare"
        reported = json.loads(line)
        launcher = reported["launcher"]
        assert not gone(launcher)
    finally:
        if end == "killed" or not line:
            host.send_signal(signal.SIGKILL)
        else:
            host.stdin.write(b"end\n")
            host.stdin.flush()
        assert host.wait(30) == (-signal.SIGKILL if end == "killed" else 0)
        for pipe in (host.stdin, host.stdout):
            if pipe is not None:
                pipe.close()
    assert wait_gone(launcher, 10), f"the held sandbox's bubblewrap {launcher} outlived its tooldir ({end})"
    if reported["cgroup"] is not None and Path(reported["cgroup"]).is_dir():
        # killed: every process of the run ended with it (then we tidy up); an exit removed it itself
        procs = Path(reported["cgroup"]) / "cgroup.procs"
        deadline = time.monotonic() + 5
        while procs.read_text().split() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not procs.read_text().split()
        Path(reported["cgroup"]).rmdir()


@pytest.mark.usefixtures("sandbox_ready")
def test_a_held_sandbox_whose_tooldir_is_gone_ends_without_starting_its_tool(tmp_path: Path) -> None:
    """A killed tooldir's pipes are closed by the kernel before its children are sent the
    parent-death signal, so bubblewrap's ``--block-fd`` reads end of file and goes on: the tool
    must still not start (reproduced by hand: 2 kills in 10 ran a held tool). Here the pipes are
    closed with nothing written, as they are when tooldir dies, deterministically."""
    ran = "import sys\nsys.stdout.write('tool code ran\\n')\nsys.stdout.flush()\n"
    make_tool(tmp_path / "user", "probe_tool", script=ran + STARTED.replace("NAME", "probe_tool"))
    config = make_config(project=None, user_dirs=[tmp_path / "user"], policy=Policy(), state_dir=tmp_path / "state")
    registry = Registry(SnapshotStore(Loader(config).load()), policy=Policy(), state_dir=tmp_path / "state")
    box = box_of(registry)
    for _ in range(2):
        assert registry.call("probe_tool", {"text": "x"}).ok
    spare = wait_for_spare(box)
    with box._spares._lock:  # ours now: the sandbox object will not discard it meanwhile
        box._spares._ready.clear()
    launched = spare.launched
    assert launched.release_fd is not None and launched.proc.stdin is not None
    os.close(launched.release_fd)  # what the kernel does to a killed tooldir's ends
    launched.release_fd = None
    launched.proc.stdin.close()
    assert launched.proc.stdout is not None
    shown = launched.proc.stdout.read()  # to its end: every process of the sandbox has ended
    launched.proc.wait()
    assert b"tool code ran" not in shown
    assert launched.proc.returncode == bubblewrap.NOT_RELEASED_EXIT
    spare.discard()
    box._spares.close()


@pytest.mark.usefixtures("sandbox_ready")
def test_a_spare_dies_when_its_registry_goes_away(tmp_path: Path) -> None:
    import gc

    registry = registry_for(tmp_path, "probe_tool")
    for _ in range(2):
        assert registry.call("probe_tool", {"text": "x"}).ok
    spare = wait_for_spare(box_of(registry))
    pid = spare.launched.proc.pid
    del registry, spare
    gc.collect()
    assert wait_gone(pid, 10)


@pytest.mark.usefixtures("sandbox_ready")
def test_a_first_call_finds_its_sandbox_set_up_ahead_at_its_start_and_the_tool_starts_only_with_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = registry_for(tmp_path, "probe_tool")
    box = box_of(registry)
    seed_copy(registry, "probe_tool")
    prepares = count_prepares(box, monkeypatch)
    called_at = time.time()
    result = registry.call("probe_tool", {"text": "1"})
    assert result.ok, result.error
    assert result.content["started"] >= called_at
    assert prepares == ["tooldir-spare-sandbox"]  # set up ahead, on the maker, while the input was checked
    box._spares.close()


@pytest.mark.usefixtures("sandbox_ready")
def test_a_processs_first_call_runs_in_the_sandbox_asked_for_at_its_start_however_late_that_request_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first call of a process probes the sandbox and asks for its set-up on a thread of its own;
    the run must wait for that request, else it sets up a sandbox of its own and the one asked
    for is made after the call and left held (the escape battery's "processes left running")."""
    registry = registry_for(tmp_path, "probe_tool")  # never probed: the call's request goes on its thread
    record = registry.store.current.get("probe_tool")
    assert record is not None
    verified_files(record, tmp_path / "state" / "sandbox" / "packages")  # the copy an earlier run leaves
    run_entered = threading.Event()
    real_ahead, real_run = Registry._ahead, BubblewrapSandbox.run

    def late_ahead(self: Registry, *args: Any) -> None:
        run_entered.wait(1.0)  # a loaded machine: the request arrives once the run started, if it may
        real_ahead(self, *args)

    def run(self: BubblewrapSandbox, request: Any) -> Any:
        run_entered.set()
        return real_run(self, request)

    prepares: list[str] = []
    real_prepare = BubblewrapSandbox._prepare

    def prepare(self: BubblewrapSandbox, request: Any, **how: Any) -> Any:
        prepares.append(threading.current_thread().name)
        return real_prepare(self, request, **how)

    monkeypatch.setattr(Registry, "_ahead", late_ahead)
    monkeypatch.setattr(BubblewrapSandbox, "run", run)
    monkeypatch.setattr(BubblewrapSandbox, "_prepare", prepare)
    result = registry.call("probe_tool", {"text": "1"})
    assert result.ok, result.error
    assert prepares == ["tooldir-spare-sandbox"]  # the sandbox asked for ahead served the call ...
    box = box_of(registry)
    assert box._spares.held() == [] and box._spares._making is None  # ... and none is left held or coming
    box._spares.close()


@pytest.mark.usefixtures("sandbox_ready")
def test_work_done_ahead_for_a_refused_call_writes_nothing_to_the_state_directory(tmp_path: Path) -> None:
    user = tmp_path / "user"
    make_tool(user, "probe_tool", script=STARTED.replace("NAME", "probe_tool"))
    policy = Policy.model_validate({"permissions": {"deny": ["probe_tool"]}})
    config = make_config(project=None, user_dirs=[user], policy=policy, state_dir=tmp_path / "state")
    registry = Registry(SnapshotStore(Loader(config).load()), policy=policy, state_dir=tmp_path / "state")
    store = box_of(registry).store_dir
    before = sorted(p.name for p in (tmp_path / "state").rglob("*"))
    result = registry.call("probe_tool", {"text": "x"})
    assert result.error is not None and result.error.code == "permission-denied"
    time.sleep(0.5)  # what the background set-up would have written by now
    assert not store.exists() or not any(store.iterdir())  # no verified copy made for a refused call
    after = sorted(p.name for p in (tmp_path / "state").rglob("*"))
    assert set(after) - set(before) <= {"audit.jsonl", "audit.head"}  # only the call's audit line
    box_of(registry)._spares.close()


@pytest.mark.usefixtures("sandbox_ready")
@pytest.mark.parametrize("refusal", ["permission", "hook"])
def test_a_refused_call_leaves_the_sandbox_prepared_for_it_held_and_the_tool_never_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refusal: str
) -> None:
    from tooldir.run.hooks import Deny

    canary = tmp_path / "ran"
    user = tmp_path / "user"
    # the canary: only a tool run outside the sandbox could write it (inside, no host path exists)
    plant = f"import contextlib\nwith contextlib.suppress(OSError):\n    open({str(canary)!r}, 'w')\n"
    script = plant + STARTED.replace("NAME", "probe_tool")
    make_tool(user, "probe_tool", script=script)
    denied = Policy.model_validate({"permissions": {"deny": ["probe_tool"]}})
    policy = denied if refusal == "permission" else Policy()
    config = make_config(project=None, user_dirs=[user], policy=policy, state_dir=tmp_path / "state")
    registry = Registry(SnapshotStore(Loader(config).load()), policy=policy, state_dir=tmp_path / "state")
    allowed = True
    if refusal == "hook":
        registry.add_pre_hook(lambda *, call, input: None if allowed else Deny("not now"), name="gate")
    allowed = False
    box = box_of(registry)
    seed_copy(registry, "probe_tool")
    prepares = count_prepares(box, monkeypatch)
    released: list[object] = []
    real_collect = bubblewrap.collect
    monkeypatch.setattr(bubblewrap, "collect", lambda *a, **k: (released.append(a), real_collect(*a, **k))[1])
    result = registry.call("probe_tool", {"text": "x"})
    assert result.error is not None
    assert result.error.code == ("permission-denied" if refusal == "permission" else "hook-denied")
    spare = wait_for_spare(box)
    assert prepares == ["tooldir-spare-sandbox"]  # it was set up ahead, at the call's start ...
    time.sleep(0.3)
    assert released == []  # ... and never released
    assert spare.usable() and not children(spare)  # bubblewrap still waits at --block-fd: no tool process
    assert not canary.exists()
    if refusal == "hook":  # allowed now: the held sandbox serves the call, the tool starts only then
        allowed = True
        called_at = time.time()
        later = registry.call("probe_tool", {"text": "y"})
        assert later.ok, later.error
        assert later.content["started"] >= called_at
        assert len(released) == 1 and gone(spare.launched.proc.pid)
    box._spares.close()
    assert gone(spare.launched.proc.pid)


@pytest.mark.usefixtures("sandbox_ready")
def test_prepare_sandboxes_holds_at_most_max_spares_and_a_prepared_first_call_sets_nothing_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [f"tool_{n}" for n in range(bubblewrap.MAX_SPARES + 2)]
    registry = registry_for(tmp_path, *names)
    box = box_of(registry)
    prepares = count_prepares(box, monkeypatch)
    asked = registry.prepare_sandboxes()
    assert asked == bubblewrap.MAX_SPARES
    deadline = time.monotonic() + 30
    while len(box._spares.held()) < bubblewrap.MAX_SPARES and time.monotonic() < deadline:
        time.sleep(0.01)
    held = box._spares.held()
    assert len(held) == bubblewrap.MAX_SPARES and all(s.usable() and not children(s) for s in held)
    made = len(prepares)
    name = next(iter(box._spares._ready)).record.name  # the oldest prepared tool: never evicted
    assert name in names[: bubblewrap.MAX_SPARES]
    called_at = time.time()
    result = registry.call(name, {"text": "x"})
    assert result.ok and result.content["started"] >= called_at
    assert len(prepares) == made  # served by its prepared sandbox: nothing set up for this call
    assert len(box._spares.held()) <= bubblewrap.MAX_SPARES
    box._spares.close()
    assert all(gone(s.launched.proc.pid) for s in held)


@pytest.mark.usefixtures("sandbox_ready")
def test_tooldir_serve_prepares_the_sandboxes_of_its_first_tools_when_it_opens(tmp_path: Path) -> None:
    from tooldir.mcp.server import ToolServer

    user = tmp_path / "user"
    make_tool(user, "probe_tool", script=STARTED.replace("NAME", "probe_tool"))
    config = make_config(project=None, user_dirs=[user], policy=Policy(), state_dir=tmp_path / "state")
    front = ToolServer.open(config, watch=False)
    try:
        box = box_of(front.registry)
        spare = wait_for_spare(box)
        assert next(iter(box._spares._ready)).record.name == "probe_tool"
        assert spare.usable() and not children(spare)  # held: nothing of the tool runs before a call
        called_at = time.time()
        result = front.registry.call("probe_tool", {"text": "x"})
        assert result.ok and result.content["started"] >= called_at
        assert gone(spare.launched.proc.pid)  # the first call was served by it
    finally:
        front.close()
        box_of(front.registry)._spares.close()
