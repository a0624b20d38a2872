"""What a tool sees in the sandbox, the example tools through the CLI, and the fail-closed path when
no sandbox works."""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path
from typing import Any

import pytest
from toolkit import make_tool

import tooldir.sandbox
from tooldir._cli import main
from tooldir.policy import Policy
from tooldir.run.registry import Registry
from tooldir.snapshot.loader import Loader, make_config
from tooldir.snapshot.store import SnapshotStore

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "fixtures" / "example"

INSPECT = """\
import json, os, sys
request = json.load(sys.stdin)
print(json.dumps({"ok": True, "content": {
    "argv": sys.argv, "request": request, "cwd": os.getcwd(), "env": dict(os.environ),
    "files": sorted(os.listdir(".")), "uid": os.getuid(),
}}))
"""

CONNECT = """\
import json, socket, sys
request = json.load(sys.stdin)
s = socket.create_connection(("127.0.0.1", request["input"]["port"]), timeout=2)
s.sendall(b"hello")
print(json.dumps({"ok": True, "content": "sent"}))
"""


def expected_memory_bound() -> str:
    return tooldir.sandbox.bubblewrap.choose_bound(Policy().sandbox).kind


def registry_with(tmp_path: Path, policy: Policy, **tool: Any) -> Registry:
    user = tmp_path / "user"
    make_tool(user, "probe_tool", **tool)
    state = tmp_path / "state"
    config = make_config(project=None, user_dirs=[user], policy=policy, state_dir=state)
    return Registry(SnapshotStore(Loader(config).load()), policy=policy, state_dir=state)


@pytest.mark.usefixtures("sandbox_ready")
def test_the_tool_gets_its_input_only_on_stdin_with_a_scrubbed_env_in_its_verified_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ALLOWED_TOKEN", "tok")
    monkeypatch.setenv("UNDECLARED", "nope")
    policy = Policy.model_validate({"sandbox": {"env_allow": ["ALLOWED_TOKEN"]}})
    execute = {"command": ["python3", "run.py"], "env": ["ALLOWED_TOKEN"]}
    registry = registry_with(tmp_path, policy, script=INSPECT, execute=execute)
    hostile = {"text": "--output=/root/.bashrc; rm -rf ~ $(id)"}  # argument injection
    result = registry.call("probe_tool", hostile, context={"conversation": "c1"})
    assert result.ok, result.error
    seen = result.content
    assert seen["argv"] == ["run.py"]  # never spliced into argv
    assert seen["request"] == {"version": 1, "input": hostile, "context": {"conversation": "c1"}}
    assert seen["cwd"] == "/tool" and seen["files"] == ["run.py", "schema.json"]
    assert seen["env"]["ALLOWED_TOKEN"] == "tok" and "UNDECLARED" not in seen["env"]
    assert seen["uid"] != 0
    assert not (Path.home() / ".bashrc").exists()


@pytest.mark.usefixtures("sandbox_ready")
def test_network_is_given_only_when_declared_and_allowed_by_policy(tmp_path: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(5)
    port = listener.getsockname()[1]
    schema = {"type": "object", "properties": {"port": {"type": "integer"}}, "required": ["port"]}
    execute = {"command": ["python3", "run.py"], "network": True}
    try:
        denied = registry_with(tmp_path / "a", Policy(), script=CONNECT, input_schema=schema, execute=execute)
        refused = denied.call("probe_tool", {"port": port})
        assert refused.error is not None and refused.error.code == "tool-failed"
        allowed_policy = Policy.model_validate({"sandbox": {"network": True, "network_unrestricted": True}})
        allowed = registry_with(tmp_path / "b", allowed_policy, script=CONNECT, input_schema=schema, execute=execute)
        result = allowed.call("probe_tool", {"port": port})
        assert result.ok, result.error
        conn, _ = listener.accept()
        assert conn.recv(5) == b"hello"
        conn.close()
    finally:
        listener.close()


@pytest.mark.usefixtures("sandbox_ready")
@pytest.mark.parametrize(
    ("tool", "value", "expected"),
    [
        ("json_format", {"document": "[1,2]", "indent": 0}, "[1,2]"),
        (
            "hash_text",
            {"text": "abc"},
            {"algorithm": "sha256", "hexdigest": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        ),
        ("unit_convert", {"value": 0, "from_unit": "C", "to_unit": "K"}, {"value": 273.15, "unit": "K"}),
    ],
    ids=["json_format", "hash_text", "unit_convert"],
)
def test_the_example_tools_run_through_tooldir_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tool: str, value: dict[str, Any], expected: Any
) -> None:
    argv = ["run", tool, "--input", json.dumps(value), "--json", "--user-dir", str(EXAMPLES / "user")]
    argv += ["--project", str(EXAMPLES / "project"), "--state-dir", str(tmp_path / "state")]
    code = main(argv)
    printed = json.loads(capsys.readouterr().out)
    assert code == 0, printed
    assert set(printed) == {"ok", "content", "error", "audit_id", "sandbox"}
    assert printed["ok"] is True and printed["error"] is None and printed["content"] == expected
    assert printed["sandbox"] == {"backend": "bubblewrap", "memory_bound": expected_memory_bound()}
    assert main(["audit", "verify", "--json", "--state-dir", str(tmp_path / "state")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and report["lines"] == 1


def test_cli_run_exit_codes_follow_the_error_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    common = [
        "--json",
        "--user-dir",
        str(EXAMPLES / "user"),
        "--project",
        str(tmp_path),
        "--state-dir",
        str(tmp_path / "s"),
    ]
    assert main(["run", "json_format", "--input", '{"document": 5}', *common]) == 2
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "invalid-input"
    assert main(["run", "no_such_tool", "--input", "{}", *common]) == 2
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "unknown-tool"
    policy = tmp_path / "plan.toml"
    policy.write_text('[permissions]\ndeny = ["json_*"]\n')
    assert main(["run", "json_format", "--input", '{"document": "1"}', "--policy", str(policy), *common]) == 3
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "permission-denied"
    assert main(["run", "json_format", "--input", "[1", *common]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert main(["run", "json_format", "--input-file", str(tmp_path / "missing.json"), *common]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_audit_verify_reports_the_first_broken_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tooldir.run.audit import AuditEvent, JsonlAudit

    sink = JsonlAudit(tmp_path / "audit.jsonl")
    for n in range(3):
        sink.record(AuditEvent(f"t{n}", "user", None, "sha256:x", "allow", None, "ok", None, 1.0))
    lines = (tmp_path / "audit.jsonl").read_bytes().splitlines(keepends=True)
    (tmp_path / "audit.jsonl").write_bytes(lines[0] + lines[2])  # line 2 deleted
    assert main(["audit", "verify", "--json", "--state-dir", str(tmp_path)]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["broken_line"] == 2


def test_without_a_working_sandbox_directory_tools_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tooldir.sandbox, "probe", lambda policy: "bwrap: setting up uid map: Permission denied")
    registry = registry_with(tmp_path, Policy())
    result = registry.call("probe_tool", {"text": "x"})
    assert result.error is not None and result.error.code == "sandbox-unavailable"
    assert "Permission denied" in result.error.message and "unsafe_allow_unsandboxed" in result.error.message


def test_the_unsafe_opt_in_runs_unsandboxed_and_warns_on_every_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(tooldir.sandbox, "probe", lambda policy: "no bwrap")
    policy = Policy.model_validate({"sandbox": {"unsafe_allow_unsandboxed": True}})
    registry = registry_with(tmp_path, policy)
    with caplog.at_level(logging.WARNING, logger="tooldir"):
        first = registry.call("probe_tool", {"text": "a"})
        second = registry.call("probe_tool", {"text": "b"})
    assert first.ok and first.content == {"text": "a"} and second.content == {"text": "b"}
    runs = [r for r in caplog.records if "WITHOUT a sandbox" in r.getMessage()]
    assert len(runs) == 2


MEMORY_HOG = """\
import json, sys
json.load(sys.stdin)
hog = bytearray(1024 * 1024 * 1024)
print(json.dumps({"ok": True, "content": len(hog)}))
"""

CPU_HOG = """\
import json, sys
json.load(sys.stdin)
while True:
    pass
"""


@pytest.mark.usefixtures("sandbox_ready")
def test_memory_limit_stops_a_tool_that_allocates_too_much(tmp_path: Path) -> None:
    policy = Policy.model_validate({"sandbox": {"memory_mb": 128}})
    registry = registry_with(tmp_path, policy, script=MEMORY_HOG)
    result = registry.call("probe_tool", {"text": "x"})
    assert result.error is not None and result.error.code == "tool-failed"
    if expected_memory_bound() == "rlimit+seccomp":
        assert "MemoryError" in result.error.message  # RLIMIT_AS refused the allocation
    else:
        assert "sandbox.memory_mb" in result.error.message  # the cgroup's OOM killer ended the tool


@pytest.mark.usefixtures("sandbox_ready")
def test_cpu_limit_kills_a_busy_loop_before_the_wall_clock_timeout(tmp_path: Path) -> None:
    policy = Policy.model_validate({"sandbox": {"cpu_s": 1, "timeout_s": 20}})
    registry = registry_with(tmp_path, policy, script=CPU_HOG)
    result = registry.call("probe_tool", {"text": "x"})
    assert result.error is not None and result.error.code == "tool-failed"  # SIGXCPU, not a timeout


FILL = """\
import json, os, sys
json.load(sys.stdin)
written = {}
for folder in ("/tmp", "/dev/shm", "/dev"):
    total = 0
    try:
        for i in range(48):
            with open(f"{folder}/fill{i}", "wb") as fh:
                fh.write(b"x" * (1 << 20))
            total += 1
    except OSError:
        pass
    written[folder] = total
print(json.dumps({"ok": True, "content": written}))
"""


@pytest.mark.usefixtures("sandbox_ready")
def test_no_writable_tmpfs_in_the_sandbox_is_larger_than_the_scratch_limit(tmp_path: Path) -> None:
    policy = Policy.model_validate({"sandbox": {"scratch_mb": 8}})
    registry = registry_with(tmp_path, policy, script=FILL)
    result = registry.call("probe_tool", {"text": "x"})
    assert result.ok, result.error
    written = result.content  # MiB each folder took before it refused more
    assert written["/tmp"] <= 8 and written["/dev/shm"] <= 8  # not the host's memory
    assert written["/dev"] == 0


@pytest.mark.usefixtures("sandbox_ready")
def test_a_sandbox_that_fails_to_start_is_reported_as_sandbox_failed_not_as_a_tool_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tooldir.sandbox import bubblewrap

    monkeypatch.setattr(bubblewrap, "sandbox_env", lambda extra=None: ["--no-such-bwrap-option"])
    registry = registry_with(tmp_path, Policy())
    result = registry.call("probe_tool", {"text": "x"})
    assert result.error is not None and result.error.code == "sandbox-failed"
    assert "no-such-bwrap-option" in result.error.message


def test_the_unsafe_path_still_runs_a_private_verified_copy_without_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    monkeypatch.setattr(tooldir.sandbox, "probe", lambda policy: "no bwrap")
    policy = Policy.model_validate({"sandbox": {"unsafe_allow_unsandboxed": True}})
    registry = registry_with(tmp_path, policy, script=INSPECT)
    result = registry.call("probe_tool", {"text": "x"})
    assert result.ok, result.error
    assert not result.content["cwd"].startswith(str(tmp_path / "user"))  # not the live package
    assert "HOME" in result.content["env"] and result.content["env"]["HOME"] == "/nonexistent"
    if os.geteuid() == 0:
        assert result.content["uid"] == policy.sandbox.run_as_uid
    assert not Path(result.content["cwd"]).exists()  # the private copy is removed afterwards


@pytest.mark.usefixtures("sandbox_ready")
def test_the_pending_project_example_runs_only_after_approval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    roots = ["--user-dir", str(EXAMPLES / "user"), "--project", str(EXAMPLES / "project")]
    state = ["--state-dir", str(tmp_path / "state")]
    run = ["run", "word_count", "--input", '{"text": "one two\\nthree"}', "--json", *roots, *state]
    assert main(run) == 3  # the project word_count shadows the user one and is pending
    refused = json.loads(capsys.readouterr().out)
    assert refused["error"]["code"] == "not-active" and "not-approved" in refused["error"]["message"]
    package = EXAMPLES / "project" / ".tooldir" / "tools" / "word_count"
    assert main(["allow", str(package), "--yes", *roots, *state]) == 0
    capsys.readouterr()
    assert main(run) == 0
    assert json.loads(capsys.readouterr().out)["content"] == {"words": 3}


SLOW_ENV = """\
import json, os, sys, time
json.load(sys.stdin)
time.sleep(1.5)
print(json.dumps({"ok": True, "content": os.environ.get("ALLOWED_TOKEN")}))
"""


@pytest.mark.usefixtures("sandbox_ready")
def test_allowed_env_values_never_appear_in_the_host_process_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading
    import time

    secret = "tok-" + tmp_path.name
    monkeypatch.setenv("ALLOWED_TOKEN", secret)
    policy = Policy.model_validate({"sandbox": {"env_allow": ["ALLOWED_TOKEN"]}})
    execute = {"command": ["python3", "run.py"], "env": ["ALLOWED_TOKEN"]}
    registry = registry_with(tmp_path, policy, script=SLOW_ENV, execute=execute)
    results: list[Any] = []
    worker = threading.Thread(target=lambda: results.append(registry.call("probe_tool", {"text": "x"})))
    worker.start()
    seen_bwrap = leaked = False
    deadline = time.monotonic() + 5
    while worker.is_alive() and time.monotonic() < deadline:
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                data = cmdline.read_bytes()
            except OSError:
                continue
            seen_bwrap = seen_bwrap or (b"bwrap" in data and b"--info-fd" in data)
            leaked = leaked or secret.encode() in data
        time.sleep(0.05)
    worker.join(timeout=10)
    assert results and results[0].ok and results[0].content == secret  # the tool did get it
    assert seen_bwrap  # the scan saw the sandbox's command line
    assert not leaked


@pytest.mark.usefixtures("sandbox_ready")
def test_the_env_and_package_memfds_never_leak_into_other_children_the_host_spawns_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess
    import threading
    import time

    monkeypatch.setenv("ALLOWED_TOKEN", "tok")
    policy = Policy.model_validate({"sandbox": {"env_allow": ["ALLOWED_TOKEN"]}})
    execute = {"command": ["python3", "run.py"], "env": ["ALLOWED_TOKEN"]}
    registry = registry_with(tmp_path, policy, script=SLOW_ENV, execute=execute)
    results: list[Any] = []
    worker = threading.Thread(target=lambda: results.append(registry.call("probe_tool", {"text": "x"})))
    worker.start()
    leaked: set[str] = set()
    deadline = time.monotonic() + 5
    while worker.is_alive() and time.monotonic() < deadline:
        # e.g. os.system or a library spawning with close_fds=False in another thread of the host
        listing = subprocess.run(
            ["/bin/ls", "-l", "/proc/self/fd"], close_fds=False, capture_output=True, text=True, check=False
        ).stdout
        leaked |= {line.split("-> ")[-1] for line in listing.splitlines() if "memfd:tooldir" in line}
        time.sleep(0.05)
    worker.join(timeout=10)
    assert results and results[0].ok, results
    assert not leaked


OPEN_FDS = """\
import json, os, sys
json.load(sys.stdin)
found = {}
for fd in range(3, 1024):
    try:
        os.fstat(fd)
    except OSError:
        continue
    found[fd] = os.readlink(f"/proc/self/fd/{fd}")
print(json.dumps({"ok": True, "content": found}))
"""


ETC_LISTING = """\
import json, os, sys
json.load(sys.stdin)
print(json.dumps({"ok": True, "content": {d: sorted(os.listdir(d)) for d in ("/etc", "/etc/ssl")}}))
"""


@pytest.mark.usefixtures("sandbox_ready")
def test_the_sandbox_sees_the_ca_certificates_but_never_the_hosts_private_tls_keys(tmp_path: Path) -> None:
    if not Path("/etc/ssl/certs").is_dir():
        pytest.skip("no /etc/ssl/certs on this host")
    registry = registry_with(tmp_path, Policy(), script=ETC_LISTING)
    result = registry.call("probe_tool", {"text": "x"})
    assert result.ok, result.error
    assert "certs" in result.content["/etc/ssl"]
    assert "private" not in result.content["/etc/ssl"]


@pytest.mark.usefixtures("sandbox_ready")
def test_the_tool_inherits_no_file_descriptor_of_the_host_beyond_stdin_stdout_stderr(tmp_path: Path) -> None:
    registry = registry_with(tmp_path, Policy(), script=OPEN_FDS)
    result = registry.call("probe_tool", {"text": "x"})
    assert result.ok, result.error
    assert result.content == {}  # e.g. never the read end of bubblewrap's --info-fd pipe


@pytest.mark.usefixtures("sandbox_ready")
def test_tooldir_run_prints_the_content_for_people_and_the_audit_id_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "json_format", "--input", '{"document": "{\\"b\\": 1}"}', "--user-dir", str(EXAMPLES / "user")]
    argv += ["--project", str(tmp_path), "--state-dir", str(tmp_path / "state")]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert '"b": 1' in captured.out
    assert "audit id:" in captured.err


@pytest.mark.usefixtures("sandbox_ready")
def test_concurrent_calls_each_get_their_own_sandbox_and_keep_one_audit_chain(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from tooldir.run.audit import verify

    registry = registry_with(tmp_path, Policy())
    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(lambda n: registry.call("probe_tool", {"text": f"call-{n}"}), range(12)))
    assert [r.content for r in results] == [{"text": f"call-{n}"} for n in range(12)], [
        r.error for r in results if not r.ok
    ]
    report = verify(tmp_path / "state" / "audit.jsonl")
    assert report.ok and report.lines == 12
