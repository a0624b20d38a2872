"""The cgroup v1 memory bound: per-run children of this process's own v1 memory (and pids)
cgroups, chosen on a v1 host where they can be made (root here and in CI), entered through the same
--block-fd hand-over as cgroup v2, killed and removed after every run; an unprivileged user on the
same host falls back to rlimit+seccomp and is told so."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import unprivileged
from toolkit import make_tool

from tooldir.policy import Policy
from tooldir.run.registry import Registry
from tooldir.sandbox import BubblewrapSandbox, RunRequest, bubblewrap, cgroup
from tooldir.snapshot.loader import Loader, make_config
from tooldir.snapshot.store import SnapshotStore

pytestmark = pytest.mark.serial  # cgroups: never beside another such test

MOUNTINFO = (
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
)
PROC_CGROUP = "8:pids:/\n4:memory:/process_api/abc\n2:cpu,cpuacct:/x\n0::/\n"


def own_v1_memory_cgroup() -> Path | None:
    """This process's v1 memory cgroup at the usual mount point, read without tooldir's parser."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            folder = Path("/sys/fs/cgroup/memory" + path.rstrip("/"))
            return folder if (folder / "memory.limit_in_bytes").exists() else None
    return None


def v1_host_as_root() -> bool:
    """Root, no usable cgroup v2 parent, and a writable own v1 memory cgroup (this machine, CI)."""
    own = own_v1_memory_cgroup()
    return os.geteuid() == 0 and cgroup.find_parent(None)[0] is None and own is not None and os.access(own, os.W_OK)


V1_ROOT = pytest.mark.skipif(not v1_host_as_root(), reason="needs root on a cgroup v1 host (as this machine and CI)")


def registry_with(tmp_path: Path, policy: Policy, sandbox: Any = None, **tool: Any) -> Registry:
    user = tmp_path / "user"
    make_tool(user, "probe_tool", **tool)
    state = tmp_path / "state"
    config = make_config(project=None, user_dirs=[user], policy=policy, state_dir=state)
    return Registry(SnapshotStore(Loader(config).load()), policy=policy, state_dir=state, sandbox=sandbox)


def request_for(registry: Registry) -> RunRequest:
    record = registry.store.current.get("probe_tool")
    assert record is not None
    return RunRequest(record, b'{"version": 1, "input": {"text": "x"}, "context": {}}', 15.0, {}, False)


# --------------------------------------------------------------------------- discovery and files (pure)


def test_the_own_v1_cgroup_of_a_controller_is_its_mount_point_plus_the_proc_path() -> None:
    assert cgroup.v1_dir(MOUNTINFO, PROC_CGROUP, "memory") == Path("/sys/fs/cgroup/memory/process_api/abc")
    assert cgroup.v1_dir(MOUNTINFO, PROC_CGROUP, "pids") == Path("/sys/fs/cgroup/pids")
    assert cgroup.v1_dir(MOUNTINFO, PROC_CGROUP, "cpuacct") == Path("/sys/fs/cgroup/cpu,cpuacct/x")
    assert cgroup.v1_dir(MOUNTINFO, PROC_CGROUP, "blkio") is None  # not in /proc/self/cgroup
    assert cgroup.v1_dir(MOUNTINFO.replace("rw,pids", "rw,freezer"), PROC_CGROUP, "pids") is None  # not mounted


def test_a_v1_mount_of_a_subtree_maps_the_proc_path_below_its_root() -> None:
    mounted = "35 31 0:32 /process_api /mnt/memory rw - cgroup cgroup rw,memory\n"
    assert cgroup.v1_dir(mounted, PROC_CGROUP, "memory") == Path("/mnt/memory/abc")
    elsewhere = "35 31 0:32 /other /mnt/memory rw - cgroup cgroup rw,memory\n"
    assert cgroup.v1_dir(elsewhere, PROC_CGROUP, "memory") is None  # this process's cgroup is not in it


def test_a_v1_run_cgroup_gets_the_memory_swap_and_pids_limits_written_to_the_kernel_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_mkdir = os.mkdir

    def kernel_mkdir(path: Any, mode: int = 0o777) -> None:  # cgroupfs makes the interface files itself
        real_mkdir(path, mode)
        names = ["pids.max"] if Path(path).parent.name == "pids" else ["memory.limit_in_bytes", "memory.oom_control"]
        for name in [*names, "cgroup.procs"]:  # no memory.memsw.*: swap is not accounted here
            Path(path, name).write_text("")

    monkeypatch.setattr(cgroup.os, "mkdir", kernel_mkdir)
    (tmp_path / "memory").mkdir()
    (tmp_path / "pids").mkdir()
    parents = cgroup.V1Parents(tmp_path / "memory", tmp_path / "pids")
    group = cgroup.RunCgroupV1.create(parents, memory_bytes=128 << 20, max_processes=66)
    assert group.path.parent == tmp_path / "memory" and group.path.name.startswith("tooldir-")
    assert group.pids_path == tmp_path / "pids" / group.path.name
    written = {p.name: p.read_text() for p in group.path.iterdir()}
    assert written == {"memory.limit_in_bytes": str(128 << 20), "memory.oom_control": "0", "cgroup.procs": ""}
    assert (group.pids_path / "pids.max").read_text() == "66"
    group.add(4242)
    assert (group.path / "cgroup.procs").read_text() == "4242"
    assert (group.pids_path / "cgroup.procs").read_text() == "4242"


def test_a_v1_oom_kill_is_read_from_memory_oom_control(tmp_path: Path) -> None:
    group = cgroup.RunCgroupV1(tmp_path, None)
    (tmp_path / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
    assert group.oom_killed() is False
    (tmp_path / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    assert group.oom_killed() is True


def test_without_a_writable_v1_memory_cgroup_there_is_no_v1_bound_and_it_says_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cgroup, "v1_dir", lambda mountinfo, proc, controller: None)
    assert cgroup.find_v1_parents() == (None, "no cgroup v1 memory hierarchy shows this process's cgroup")
    monkeypatch.setattr(cgroup, "v1_dir", lambda mountinfo, proc, controller: tmp_path)
    monkeypatch.setattr(cgroup.os, "access", lambda path, mode: False)
    parents, why = cgroup.find_v1_parents()
    assert parents is None and str(tmp_path) in why and "not writable" in why


def test_stale_run_cgroups_of_a_killed_tooldir_are_swept_and_nothing_else(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])  # a pid that is gone
    dead.wait()
    old = time.time() - 3600
    names = {
        "stale": f"tooldir-{dead.pid}-deadbeef",
        "busy": f"tooldir-{dead.pid}-cafebabe",  # still has a task (here: a file): rmdir refuses
        "creator-alive": f"tooldir-{os.getpid()}-0badf00d",
        "fresh": f"tooldir-{dead.pid}-12345678",
        "not-ours": "tooldir-notes",
    }
    for key, name in names.items():
        (tmp_path / name).mkdir()
        if key == "busy":
            (tmp_path / name / "cgroup.procs").write_text("1")
        if key != "fresh":
            os.utime(tmp_path / name, (old, old))
    assert cgroup.sweep_stale(tmp_path) == [tmp_path / names["stale"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(v for k, v in names.items() if k != "stale")


# --------------------------------------------------------------------------- the real kernel, as root


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[tuple[cgroup.RunCgroupV1, dict[str, str]]]:
    """Every v1 run cgroup created, with its limit files as read back from the kernel."""
    groups: list[tuple[cgroup.RunCgroupV1, dict[str, str]]] = []
    real_create = cgroup.RunCgroupV1.create.__func__  # type: ignore[attr-defined]

    def create(cls: type[cgroup.RunCgroupV1], parents: cgroup.V1Parents, **limits: int) -> cgroup.RunCgroupV1:
        group: cgroup.RunCgroupV1 = real_create(cls, parents, **limits)
        if limits["max_processes"] == 1:
            return group  # find_v1_parents' probe, not a run
        names = ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]
        read = {n: (group.path / n).read_text().strip() for n in names if (group.path / n).exists()}
        if group.pids_path is not None:
            read["pids.max"] = (group.pids_path / "pids.max").read_text().strip()
        groups.append((group, read))
        return group

    monkeypatch.setattr(cgroup.RunCgroupV1, "create", classmethod(create))
    return groups


INSIDE = """\
import json, os, subprocess, sys
json.load(sys.stdin)
limits = {line[:26].strip(): line[26:47].strip() for line in open("/proc/self/limits").read().splitlines()[1:]}
os.close(os.memfd_create("probe"))
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
print(json.dumps({"ok": True, "content": {"cgroups": open("/proc/self/cgroup").read().splitlines(),
    "as": limits["Max address space"]}}))
"""

HOARD = """\
import json, os, sys
json.load(sys.stdin)
chunk, held = b"m" * (1 << 20), []
for n in range(48):  # 48 memfds of 32 MiB (each under RLIMIT_FSIZE): 1536 MiB
    held.append(os.memfd_create("hoard"))
    print("memfd created", file=sys.stderr, flush=True)
    for _ in range(32):
        os.write(held[-1], chunk)
print(json.dumps({"ok": True, "content": "HOARDED 1536 MiB"}))
"""


@pytest.mark.usefixtures("sandbox_ready")
@V1_ROOT
def test_as_root_on_a_cgroup_v1_host_the_default_policy_picks_the_cgroup_v1_bound() -> None:
    bound = bubblewrap.choose_bound(Policy().sandbox)
    assert bound.kind == "cgroup-v1"
    assert bound.v1 is not None and bound.v1.memory == own_v1_memory_cgroup()
    box = BubblewrapSandbox(Policy().sandbox, Path(tempfile.gettempdir()), bound=bound)
    assert box.memory_bound == "cgroup-v1"


@pytest.mark.usefixtures("sandbox_ready")
@V1_ROOT
def test_under_cgroup_v1_the_tool_runs_inside_its_own_cgroups_which_are_gone_afterwards(
    tmp_path: Path, made: list[tuple[cgroup.RunCgroupV1, dict[str, str]]]
) -> None:
    policy = Policy.model_validate({"sandbox": {"memory_mb": 200, "max_processes": 20}})
    registry = registry_with(tmp_path, policy, script=INSIDE)
    result = registry.call("probe_tool", {"text": "x"})
    assert result.ok, result.error
    [(group, limits)] = made
    assert limits["memory.limit_in_bytes"] == str(200 << 20)
    if "memory.memsw.limit_in_bytes" in limits:
        assert limits["memory.memsw.limit_in_bytes"] == str(200 << 20)
    if group.pids_path is not None:
        assert limits["pids.max"] == "22"  # max_processes + bubblewrap's two
    memory_line = next(line for line in result.content["cgroups"] if ":memory:" in line)
    assert memory_line.endswith("/" + group.path.name)  # the tool's first look: already inside
    assert result.content["as"] == "unlimited"  # the cgroup bounds memory, not RLIMIT_AS
    assert not group.path.exists()
    assert group.pids_path is None or not group.pids_path.exists()


@pytest.mark.usefixtures("sandbox_ready")
@V1_ROOT
def test_under_cgroup_v1_a_tool_holding_memfds_beyond_memory_mb_is_killed_and_its_cgroups_removed(
    tmp_path: Path, made: list[tuple[cgroup.RunCgroupV1, dict[str, str]]]
) -> None:
    policy = Policy.model_validate({"sandbox": {"memory_mb": 128}})
    registry = registry_with(tmp_path, policy, script=HOARD)
    box = registry.sandbox()
    assert isinstance(box, BubblewrapSandbox) and box.memory_bound == "cgroup-v1"
    result = box.run(request_for(registry))
    assert b"memfd created" in result.stderr  # not denied: the cgroup counts memfd pages
    assert result.memory_exceeded is True
    assert result.exit_code != 0 and b"HOARDED" not in result.stdout
    [(group, _)] = made
    assert not group.path.exists()
    assert group.pids_path is None or not group.pids_path.exists()
    called = registry.call("probe_tool", {"text": "x"})
    assert called.error is not None and called.error.code == "tool-failed"


@pytest.mark.usefixtures("sandbox_ready")
@V1_ROOT
def test_a_trivial_node_tool_runs_under_the_cgroup_v1_bound_and_the_default_policy(tmp_path: Path) -> None:
    script = 'let s = ""; process.stdin.on("data", (c) => { s += c; });\n'
    script += 'process.stdin.on("end", () => console.log(JSON.stringify({ ok: true, content: "node" })));\n'
    registry = registry_with(
        tmp_path, Policy(), extra_files={"run.js": script}, execute={"command": ["node", "run.js"]}
    )
    box = registry.sandbox()
    assert box is not None and box.memory_bound == "cgroup-v1"  # type: ignore[attr-defined]
    result = registry.call("probe_tool", {"text": "x"})
    assert result.ok, result.error
    assert result.content == "node"


# --------------------------------------------------------------------------- an unprivileged user


@pytest.mark.usefixtures("sandbox_ready")
@V1_ROOT
def test_an_unprivileged_user_on_a_v1_host_falls_back_to_rlimit_seccomp_and_tooldir_run_says_so() -> None:
    with unprivileged.throwaway_user() as user:
        entry = pwd.getpwnam(user)
        workdir = Path(tempfile.mkdtemp(prefix="tooldir-v1-user-", dir="/tmp"))
        try:
            make_tool(workdir / "tools", "probe_tool")
            for path in [workdir, *workdir.rglob("*")]:
                os.chown(path, entry.pw_uid, entry.pw_gid)
            os.chmod(workdir, 0o700)
            argv = [sys.executable, "-m", "tooldir", "run", "probe_tool", "--input", '{"text": "hi"}', "--json"]
            argv += ["--user-dir", "tools", "--project", "."]  # the state dir: the default, under HOME
            done = unprivileged.run_as_user(user, argv, workdir, expose=unprivileged.python_trees())
            assert done.stdout, done.stderr.decode()[-3000:]
            printed = json.loads(done.stdout)
            assert printed["ok"] is True, printed
            assert printed["content"] == {"text": "hi"}
            assert printed["sandbox"] == {"backend": "bubblewrap", "memory_bound": "rlimit+seccomp"}
        finally:
            shutil.rmtree(workdir, ignore_errors=True)


@pytest.mark.usefixtures("sandbox_ready")
def test_a_v1_run_cgroup_that_cannot_be_made_fails_the_run_closed_before_the_tool_starts(tmp_path: Path) -> None:
    gone = tmp_path / "no-such-cgroup"
    bound = bubblewrap.Bound("cgroup-v1", v1=cgroup.V1Parents(gone, None))
    box = BubblewrapSandbox(Policy().sandbox, tmp_path / "state", bound=bound)
    assert box.memory_bound == "cgroup-v1"
    canary = tmp_path / "ran"
    script = f"import json, sys\njson.load(sys.stdin)\nopen({str(canary)!r}, 'w')\n"
    result = registry_with(tmp_path, Policy(), sandbox=box, script=script).call("probe_tool", {"text": "x"})
    assert result.error is not None and result.error.code == "sandbox-failed"
    assert str(gone) in result.error.message
    assert not canary.exists()
