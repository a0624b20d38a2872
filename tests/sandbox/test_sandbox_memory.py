"""The memory bound (cgroup v2, cgroup v1, a systemd scope, or RLIMIT_AS + seccomp), common runtimes under the default policy,
the seccomp opt-out on an untabulated arch, and the cgroup hand-over before any tool code runs."""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from toolkit import make_tool

from tooldir.policy import Policy
from tooldir.run.registry import Registry
from tooldir.sandbox import BubblewrapSandbox, RunRequest, bubblewrap, cgroup, scope, seccomp
from tooldir.sandbox.bubblewrap import Bound
from tooldir.sandbox.process import TRUSTED_PATH
from tooldir.snapshot.loader import Loader, make_config
from tooldir.snapshot.store import SnapshotStore

pytestmark = [
    pytest.mark.usefixtures("sandbox_ready"),
    pytest.mark.serial,
]  # memory bounds: never beside another such test

LIMITS = """\
import json, os, sys
json.load(sys.stdin)
limits = {}
for line in open("/proc/self/limits").read().splitlines()[1:]:
    name = line[:26].strip()
    limits[name] = line[26:47].strip()
try:
    os.close(os.memfd_create("probe"))
    memfd = "created"
except OSError as exc:
    memfd = f"refused: {exc.errno}"
fds = sorted(int(fd) for fd in os.listdir("/proc/self/fd") if int(fd) > 2)[:-1]  # less listdir's own
print(json.dumps({"ok": True, "content": {"as": limits["Max address space"],
    "msgqueue": limits["Max msgqueue size"], "memfd": memfd, "fds": fds}}))
"""

NODE_TOOL = """\
let input = "";
process.stdin.on("data", (chunk) => { input += chunk; });
process.stdin.on("end", () => {
  const request = JSON.parse(input);
  console.log(JSON.stringify({ ok: true, content: "node says " + request.input.text }));
});
"""


def registry_with(tmp_path: Path, policy: Policy, sandbox: Any = None, **tool: Any) -> Registry:
    user = tmp_path / "user"
    make_tool(user, "probe_tool", **tool)
    state = tmp_path / "state"
    config = make_config(project=None, user_dirs=[user], policy=policy, state_dir=state)
    return Registry(SnapshotStore(Loader(config).load()), policy=policy, state_dir=state, sandbox=sandbox)


def expected_memory_bound() -> str:
    return bubblewrap.choose_bound(Policy().sandbox).kind


# --------------------------------------------------------------------------- runtimes, default policy


@pytest.mark.skipif(shutil.which("node", path=TRUSTED_PATH) is None, reason="node is not installed here")
def test_a_trivial_node_tool_runs_under_the_default_policy(tmp_path: Path) -> None:
    execute = {"command": ["node", "run.js"]}
    registry = registry_with(tmp_path, Policy(), extra_files={"run.js": NODE_TOOL}, execute=execute)
    result = registry.call("probe_tool", {"text": "hi"})
    assert result.ok, result.error
    assert result.content == "node says hi"


def test_a_trivial_python_tool_runs_under_the_default_policy(tmp_path: Path) -> None:
    registry = registry_with(tmp_path, Policy())
    result = registry.call("probe_tool", {"text": "hi"})
    assert result.ok, result.error


# --------------------------------------------------------------------------- the fallback bound


def test_without_a_cgroup_rlimit_as_is_memory_mb_plus_the_slack_and_memfds_are_refused(tmp_path: Path) -> None:
    policy = Policy.model_validate({"sandbox": {"memory_mb": 128, "memory_bound": "rlimit+seccomp"}})
    registry = registry_with(tmp_path, policy, script=LIMITS)
    result = registry.call("probe_tool", {"text": "x"})
    assert result.ok, result.error
    assert result.content["as"] == str((128 + 512) * 1024 * 1024)
    assert result.content["msgqueue"] == "0"
    assert result.content["memfd"] == "refused: 1"  # EPERM
    box = registry.sandbox()
    assert box is not None and box.memory_bound == "rlimit+seccomp"  # type: ignore[attr-defined]


def test_a_zero_slack_makes_rlimit_as_exactly_memory_mb(tmp_path: Path) -> None:
    policy = Policy.model_validate(
        {"sandbox": {"memory_mb": 256, "address_space_slack_mb": 0, "memory_bound": "rlimit+seccomp"}}
    )
    result = registry_with(tmp_path, policy, script=LIMITS).call("probe_tool", {"text": "x"})
    assert result.ok, result.error
    assert result.content["as"] == str(256 * 1024 * 1024)


def test_memory_bound_cgroup_refuses_to_run_where_no_cgroup_can_be_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bubblewrap, "find_parent", lambda configured: (None, "no delegated cgroup here"))
    monkeypatch.setattr(bubblewrap, "find_v1_parents", lambda: (None, "no writable cgroup v1 here"))
    monkeypatch.setattr(scope, "unusable", lambda: "no systemd user manager here")
    policy = Policy.model_validate({"sandbox": {"memory_bound": "cgroup"}})
    result = registry_with(tmp_path, policy).call("probe_tool", {"text": "x"})
    assert result.error is not None and result.error.code == "sandbox-unavailable"
    assert "no delegated cgroup here" in result.error.message


def test_a_configured_cgroup_parent_that_is_not_a_cgroup_is_reported_with_its_path(tmp_path: Path) -> None:
    policy = Policy.model_validate({"sandbox": {"memory_bound": "cgroup", "cgroup_parent": str(tmp_path / "nope")}})
    result = registry_with(tmp_path, policy).call("probe_tool", {"text": "x"})
    assert result.error is not None and result.error.code == "sandbox-unavailable"
    assert "sandbox.cgroup_parent" in result.error.message and str(tmp_path / "nope") in result.error.message


# --------------------------------------------------------------------------- the cgroup hand-over


class RecordingCgroup:
    """Stands in for a cgroup: records each pid moved in and what that process was doing then."""

    made: ClassVar[list[RecordingCgroup]] = []
    fail_add: ClassVar[bool] = False

    def __init__(self, path: Path, memory_bytes: int, max_processes: int) -> None:
        self.path = path
        self.memory_bytes = memory_bytes
        self.max_processes = max_processes
        self.added: list[tuple[int, str, str]] = []  # pid, cmdline, children at the time
        self.closed = False

    @classmethod
    def create(cls, parent: Path, *, memory_bytes: int, max_processes: int) -> RecordingCgroup:
        group = cls(parent / "run", memory_bytes, max_processes)
        cls.made.append(group)
        return group

    def add(self, pid: int) -> None:
        if self.fail_add:
            raise PermissionError(13, "Permission denied")
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().strip()
        self.added.append((pid, cmdline, children))

    def oom_killed(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def recording(monkeypatch: pytest.MonkeyPatch) -> type[RecordingCgroup]:
    RecordingCgroup.made = []
    RecordingCgroup.fail_add = False
    monkeypatch.setattr(bubblewrap, "RunCgroup", RecordingCgroup)
    return RecordingCgroup


def test_with_a_cgroup_both_bubblewrap_processes_are_moved_in_before_the_tool_starts(
    tmp_path: Path, recording: type[RecordingCgroup]
) -> None:
    policy = Policy.model_validate({"sandbox": {"memory_mb": 128, "max_processes": 10}})
    box = BubblewrapSandbox(policy.sandbox, tmp_path / "state", bound=Bound("cgroup", tmp_path / "parent"))
    assert box.memory_bound == "cgroup"
    result = registry_with(tmp_path, policy, sandbox=box, script=LIMITS).call("probe_tool", {"text": "x"})
    assert result.ok, result.error
    [group] = recording.made
    assert (group.memory_bytes, group.max_processes) == (128 * 1024 * 1024, 10 + 2)
    assert group.closed
    launcher, init = group.added
    assert os.path.basename(launcher[1]) == "bwrap" and os.path.basename(init[1]) == "bwrap"
    assert launcher[2] == str(init[0])  # the launcher's one child is the sandbox's init ...
    assert init[2] == ""  # ... which had not forked the tool yet
    # the cgroup bounds memory, so the address space is not limited and memfds are allowed
    assert result.content["as"] == "unlimited"
    assert result.content["memfd"] == "created"
    assert result.content["fds"] == []  # never the --block-fd pipe (or any other of the host's)


def test_a_cgroup_that_cannot_take_the_sandbox_fails_the_run_before_the_tool_starts(
    tmp_path: Path, recording: type[RecordingCgroup]
) -> None:
    recording.fail_add = True
    policy = Policy()
    box = BubblewrapSandbox(policy.sandbox, tmp_path / "state", bound=Bound("cgroup", tmp_path / "parent"))
    canary = tmp_path / "ran"
    script = f"import json, sys\njson.load(sys.stdin)\nopen({str(canary)!r}, 'w')\n"
    registry = registry_with(tmp_path, Policy(), sandbox=box, script=script)
    result = registry.call("probe_tool", {"text": "x"})
    assert result.error is not None and result.error.code == "sandbox-failed"
    assert "cgroup" in result.error.message
    assert recording.made[0].closed
    assert bubblewrap_processes_left(tmp_path) == []


def bubblewrap_processes_left(tmp_path: Path) -> list[int]:
    marker = str(tmp_path).encode()
    left = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker in Path(f"/proc/{entry}/cmdline").read_bytes():
                    left.append(int(entry))
            except OSError:
                continue
    return left


# --------------------------------------------------------------------------- no filter for this arch


def test_on_an_arch_without_a_seccomp_filter_runs_are_refused_unless_the_policy_opts_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(seccomp.platform, "machine", lambda: "riscv64")
    refused = registry_with(tmp_path / "a", Policy()).call("probe_tool", {"text": "x"})
    assert refused.error is not None and refused.error.code == "sandbox-unavailable"
    assert "unsafe_allow_no_seccomp" in refused.error.message
    policy = Policy.model_validate({"sandbox": {"unsafe_allow_no_seccomp": True}})
    with caplog.at_level(logging.WARNING, logger="tooldir"):
        ran = registry_with(tmp_path / "b", policy).call("probe_tool", {"text": "x"})
    assert ran.ok, ran.error
    assert any("WITHOUT a seccomp filter" in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------- cgroup discovery (pure)


def test_the_cgroup2_mount_and_own_cgroup_are_read_from_proc_text() -> None:
    mountinfo = (
        "30 23 0:26 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory\n"
        "35 23 0:31 / /sys/fs/cgroup/unified rw,relatime shared:14 - cgroup2 cgroup2 rw\n"
    )
    assert cgroup.cgroup2_mount(mountinfo) == "/sys/fs/cgroup/unified"
    assert cgroup.cgroup2_mount("30 23 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n") is None
    assert cgroup.own_cgroup("4:memory:/a\n0::/user.slice/u.service\n") == "/user.slice/u.service"
    assert cgroup.own_cgroup("4:memory:/a\n") is None


def test_a_cgroup_parent_needs_memory_and_pids_enabled_for_its_children(tmp_path: Path) -> None:
    assert "not a cgroup v2 directory" in (cgroup.unusable(tmp_path) or "")
    (tmp_path / "cgroup.subtree_control").write_text("cpu memory\n")
    assert "pids" in (cgroup.unusable(tmp_path) or "")
    (tmp_path / "cgroup.subtree_control").write_text("cpu memory pids\n")
    assert cgroup.unusable(tmp_path) is None


def test_a_run_cgroup_is_created_with_its_limits_written_to_the_kernel_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_mkdir = os.mkdir

    def kernel_mkdir(path: Any, mode: int = 0o777) -> None:  # cgroupfs makes the interface files itself
        real_mkdir(path, mode)
        for name in ("memory.max", "memory.oom.group", "pids.max", "cgroup.procs"):  # no swap accounting
            Path(path, name).write_text("")

    monkeypatch.setattr(cgroup.os, "mkdir", kernel_mkdir)
    group = cgroup.RunCgroup.create(tmp_path, memory_bytes=128 << 20, max_processes=66)
    assert group.path.parent == tmp_path and group.path.name.startswith("tooldir-")
    written = {p.name: p.read_text() for p in group.path.iterdir()}
    assert written == {"memory.max": str(128 << 20), "memory.oom.group": "1", "pids.max": "66", "cgroup.procs": ""}
    group.add(4242)
    assert (group.path / "cgroup.procs").read_text() == "4242"


def test_an_oom_kill_is_read_from_memory_events(tmp_path: Path) -> None:
    group = cgroup.RunCgroup(tmp_path)
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 0\n")
    assert group.oom_killed() is False
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 9\noom 2\noom_kill 1\n")
    assert group.oom_killed() is True


# --------------------------------------------------------------------------- socket families, network granted

FAMILIES = """\
import json, socket, sys
json.load(sys.stdin)
seen = {}
for name, family, kind in [("inet", 2, socket.SOCK_DGRAM), ("inet6", 10, socket.SOCK_DGRAM),
                           ("unix", 1, socket.SOCK_STREAM), ("vsock", 40, socket.SOCK_STREAM),
                           ("netlink", 16, socket.SOCK_RAW)]:
    try:
        socket.socket(family, kind).close()
        seen[name] = "opened"
    except OSError as exc:
        seen[name] = exc.errno
print(json.dumps({"ok": True, "content": seen}))
"""


def test_a_tool_granted_the_network_gets_inet_and_inet6_but_still_no_vsock(tmp_path: Path) -> None:
    # "network": true (any host) is granted only with the weakening sandbox.network_unrestricted
    policy = Policy.model_validate({"sandbox": {"network": True, "network_unrestricted": True}})
    execute = {"command": ["python3", "run.py"], "network": True}
    result = registry_with(tmp_path, policy, script=FAMILIES, execute=execute).call("probe_tool", {"text": "x"})
    assert result.ok, result.error
    assert result.content == {"inet": "opened", "inet6": "opened", "unix": "opened", "vsock": 97, "netlink": 97}


def test_network_true_without_network_unrestricted_gets_only_unix_sockets(tmp_path: Path) -> None:
    policy = Policy.model_validate({"sandbox": {"network": True}})
    execute = {"command": ["python3", "run.py"], "network": True}
    result = registry_with(tmp_path, policy, script=FAMILIES, execute=execute).call("probe_tool", {"text": "x"})
    assert result.ok, result.error
    assert result.content == {"inet": 97, "inet6": 97, "unix": "opened", "vsock": 97, "netlink": 97}


def test_a_tool_without_network_gets_only_unix_sockets(tmp_path: Path) -> None:
    result = registry_with(tmp_path, Policy(), script=FAMILIES).call("probe_tool", {"text": "x"})
    assert result.ok, result.error
    assert result.content == {"inet": 97, "inet6": 97, "unix": "opened", "vsock": 97, "netlink": 97}


# --------------------------------------------------------------------------- systemd user scope

FAKE_SYSTEMD_RUN = """#!/bin/sh
# stands in for systemd-run: reports its options on stderr, then runs the command after "--"
while [ "$1" != "--" ]; do printf '%s\\n' "$1" >&2; shift; done
shift
exec "$@"
"""


@pytest.fixture
def fake_systemd_run(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    folder = Path(tempfile.mkdtemp(prefix="tooldir-fake-systemd-", dir="/tmp"))
    try:
        os.chmod(folder, 0o755)  # noqa: S103 - the sandbox may start as run_as_uid: it must run the fake
        fake = folder / "systemd-run"
        fake.write_text(FAKE_SYSTEMD_RUN)
        fake.chmod(0o755)
        monkeypatch.setattr(scope, "find_systemd_run", lambda: str(fake))
        yield str(fake)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_the_scope_prefix_sets_memory_swap_and_task_limits() -> None:
    argv = scope.scope_prefix("/usr/bin/systemd-run", memory_bytes=128 << 20, max_tasks=66)
    assert argv[:5] == ["/usr/bin/systemd-run", "--user", "--scope", "--quiet", "--collect"]
    assert argv[-1] == "--"
    properties = {argv[i + 1] for i, a in enumerate(argv) if a == "-p"}
    assert properties == {f"MemoryMax={128 << 20}", "MemorySwapMax=0", "TasksMax=66"}


def test_with_a_systemd_scope_the_whole_sandbox_runs_inside_it_with_the_policy_limits(
    tmp_path: Path, fake_systemd_run: str
) -> None:
    policy = Policy.model_validate({"sandbox": {"memory_mb": 200, "max_processes": 20}})
    box = BubblewrapSandbox(policy.sandbox, tmp_path / "state", bound=Bound("systemd-scope"))
    assert box.memory_bound == "systemd-scope"
    registry = registry_with(tmp_path, policy, sandbox=box, script=LIMITS)
    record = registry.store.current.get("probe_tool")
    assert record is not None
    request = RunRequest(record, b'{"version": 1, "input": {"text": "x"}, "context": {}}', 10.0, {}, False)
    result = box.run(request)
    assert result.exit_code == 0, result.stderr
    told = result.stderr.decode().split()
    assert f"MemoryMax={200 << 20}" in told and "MemorySwapMax=0" in told and "TasksMax=22" in told
    content = json.loads(result.stdout)["content"]
    assert content["as"] == "unlimited" and content["memfd"] == "created"


def test_the_scope_probe_trusts_only_a_memory_limit_it_can_read_back(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = tmp_path / "systemd-run"
    monkeypatch.setattr(scope, "find_systemd_run", lambda: str(fake))
    fake.write_text(f"#!/bin/sh\necho {64 * 1024 * 1024}\n")
    fake.chmod(0o755)
    assert scope._probe.__wrapped__(os.getuid()) is None
    fake.write_text("#!/bin/sh\necho max\n")  # a scope without the memory controller
    assert "no memory limit" in (scope._probe.__wrapped__(os.getuid()) or "")
    fake.write_text("#!/bin/sh\necho 'Failed to connect to bus' >&2\nexit 1\n")
    assert "Failed to connect to bus" in (scope._probe.__wrapped__(os.getuid()) or "")


def test_root_never_uses_a_systemd_user_scope() -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can show this")
    assert scope.unusable() == "systemd-run --user is not used as root"
