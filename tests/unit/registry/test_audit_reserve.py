"""No tool starts unless its audit line is sure to be written (issue 23 item 10).

Room for the line is reserved in the log before the tool starts (``fallocate`` keeping the size);
when it cannot be, the call is refused with ``audit-unavailable`` and nothing runs. The full disks
here are real: a small tmpfs (mounting needs root: those tests say so and are skipped otherwise;
the file-size-limit test below needs no privilege) filled to the last byte.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from regkit import NOOP_SCHEMA, registry_for
from shared_helpers import require_sandbox
from toolkit import make_tool

from tooldir.run import audit
from tooldir.run.audit import (
    LINE_RESERVE,
    NETWORK_CAP,
    NETWORK_LINE_BYTES,
    TEXT_CAP,
    AuditEvent,
    JsonlAudit,
    bounded_fields,
    verify,
)

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs (a real full disk) needs root")


def event(n: int, status: str = "ok") -> AuditEvent:
    return AuditEvent(f"tool{n}", "user", None, "sha256:x", "allow", None, status, None, 1.0)


def fill(folder: Path) -> Path:
    """Write ``folder/filler`` until the file system has no byte left."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as fh:
        for size in (1 << 16, 4096, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    fh.write(b"\0" * size)
    return filler


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs, unmounted afterwards."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tooldir-full", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def canary_tool(canary: Path, effect: Any = None) -> Any:
    def handler(*, input: Any, context: Any) -> str:
        canary.write_text("ran")
        if effect is not None:
            effect()
        return "done"

    return handler


def longest_event() -> AuditEvent:
    odd = "\x01\ud800" * (4 * TEXT_CAP)  # every character escaped as six bytes, past every cap
    connection = {"host": odd, "port": 65535, "address": odd, "bytes_up": 2**62, "bytes_down": 2**62, "refused": odd}
    return AuditEvent(
        *(odd,) * 8,
        float("nan"),
        snapshot=odd,
        session=odd,
        tool_sha256=odd,
        intent=odd,
        secrets=tuple(f"S{n:02d}" + "X" * 125 for n in range(16)),  # 16 names of the longest kind
        network=[connection] * 1000,  # a run's proxy records 512, then sums the rest: more than ever
    )


def test_the_longest_line_the_log_can_hold_fits_in_the_reserve(tmp_path: Path) -> None:
    longest = longest_event()
    sink = JsonlAudit(tmp_path / "audit.jsonl", sync_interval_s=0.2)  # the longest mode fields too
    sink.record(longest)
    sink.close()
    line = (tmp_path / "audit.jsonl").read_bytes()
    assert len(line) > 10_000  # it really is long: the caps, not the input, bound it
    assert len(line) <= LINE_RESERVE


@needs_root
def test_a_call_on_a_full_disk_is_refused_before_its_tool_starts_and_runs_once_space_is_back(
    small_disk: Path,
) -> None:
    canary = small_disk.parent / "canary"
    setup = registry_for(small_disk.parent, audit=JsonlAudit(small_disk / "audit.jsonl"))
    setup.registry.register("touch", NOOP_SCHEMA, canary_tool(canary), description="x")
    assert setup.registry.call("touch", {}).ok
    canary.unlink()
    log = (small_disk / "audit.jsonl").read_bytes()
    filler = fill(small_disk)
    result = setup.registry.call("touch", {})
    assert not result.ok and result.error is not None and result.error.code == "audit-unavailable"
    assert "not started" in result.error.message and "No space left on device" in result.error.message
    assert not canary.exists()  # the tool never started
    now = (small_disk / "audit.jsonl").read_bytes()
    assert now.startswith(log)  # no torn line: the refusal itself fits in what the last reserve left
    refusal = json.loads(now[len(log) :])
    assert (refusal["status"], refusal["error_code"]) == ("denied", "audit-unavailable")
    filler.unlink()  # space is back
    assert setup.registry.call("touch", {}).ok and canary.exists()
    report = verify(small_disk / "audit.jsonl")
    assert report.ok and report.lines == 3, report.to_json()


@needs_root
def test_a_tool_that_fills_the_disk_while_it_runs_still_gets_its_line(small_disk: Path) -> None:
    canary = small_disk.parent / "canary"
    setup = registry_for(small_disk.parent, audit=JsonlAudit(small_disk / "audit.jsonl"))
    setup.registry.register("hog", NOOP_SCHEMA, canary_tool(canary, lambda: fill(small_disk)), description="x")
    result = setup.registry.call("hog", {})
    assert result.ok and result.content == "done" and result.audit_id is not None
    lines = (small_disk / "audit.jsonl").read_bytes().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [result.audit_id]
    assert verify(small_disk / "audit.jsonl").ok


@needs_root
def test_a_refusal_never_takes_the_room_reserved_for_a_running_tool(small_disk: Path) -> None:
    sink = JsonlAudit(small_disk / "audit.jsonl")
    reservation = sink.reserve(event(0, "started"))
    fill(small_disk)
    with pytest.raises(OSError) as caught:
        sink.record(event(1, "denied"))  # no reservation: it may not eat the reserved room
    assert caught.value.errno == errno.ENOSPC
    sink.record_reserved(event(2), reservation)
    report = verify(small_disk / "audit.jsonl")
    assert report.ok and report.lines == 1, report.to_json()


@needs_root
def test_in_one_group_commit_on_a_full_disk_the_reserved_line_is_written_and_the_refusals_fail_alone(
    small_disk: Path,
) -> None:
    sink = JsonlAudit(small_disk / "audit.jsonl")
    mine = sink.reserve(event(0, "started"))  # this batch's call
    other = sink.reserve(event(0, "started"))  # another call whose tool is still running
    fill(small_disk)
    refusals = [audit._Pending(c * 32, audit.bounded_fields(longest_event().fields())) for c in "ab"]
    ran = audit._Pending("c" * 32, audit.bounded_fields(event(2).fields()), reserved=True)
    sink._commit([*refusals, ran])  # one batch of the group commit: the refusals would eat the other's room
    sink.release(mine)
    for refusal in refusals:
        assert isinstance(refusal.error, OSError) and refusal.error.errno == errno.ENOSPC
    assert ran.done and ran.error is None
    lines = [json.loads(line) for line in (small_disk / "audit.jsonl").read_bytes().splitlines()]
    assert [(line["seq"], line["id"]) for line in lines] == [(1, "c" * 32)]
    sink.record_reserved(event(3), other)  # the other tool's line still fits
    assert verify(small_disk / "audit.jsonl").ok


@needs_root
def test_a_read_only_state_dir_refuses_the_call_naming_the_file_system(small_disk: Path) -> None:
    canary = small_disk.parent / "canary"
    setup = registry_for(small_disk.parent, audit=JsonlAudit(small_disk / "audit.jsonl"))
    setup.registry.register("touch", NOOP_SCHEMA, canary_tool(canary), description="x")
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    result = setup.registry.call("touch", {})
    assert result.error is not None and result.error.code == "audit-unavailable"
    assert "Read-only file system" in result.error.message and str(small_disk) in result.error.message
    assert not canary.exists()


def test_a_file_size_limit_refuses_the_call_before_the_tool_starts_also_unprivileged(tmp_path: Path) -> None:
    """RLIMIT_FSIZE (EFBIG) is a full disk any user can make: the reserve past the log's end is over it."""
    state = tmp_path / "state"
    canary = tmp_path / "canary"
    script = f"""
import resource, sys
sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(Path(__file__).parents[2])!r}]
from regkit import NOOP_SCHEMA, registry_for
from pathlib import Path
from tooldir.run.audit import JsonlAudit
setup = registry_for(Path({str(tmp_path)!r}), audit=JsonlAudit(Path({str(state)!r}) / "audit.jsonl"))
def touch(*, input, context):
    Path({str(canary)!r}).write_text("ran")
    return "done"
setup.registry.register("touch", NOOP_SCHEMA, touch, description="x")
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
result = setup.registry.call("touch", {{}})
print(result.error.code, result.error.message)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.startswith("audit-unavailable "), out.stdout + out.stderr
    assert "File too large" in out.stdout
    assert not canary.exists()
    assert verify(state / "audit.jsonl").ok
    assert resource.getrlimit(resource.RLIMIT_FSIZE)[0] == resource.RLIM_INFINITY  # only the child was limited


def test_an_io_error_while_reserving_refuses_the_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def eio(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    canary = tmp_path / "canary"
    setup = registry_for(tmp_path)
    setup.registry.register("touch", NOOP_SCHEMA, canary_tool(canary), description="x")
    monkeypatch.setattr(audit, "_fallocate_keep_size", eio)
    result = setup.registry.call("touch", {})
    assert result.error is not None and result.error.code == "audit-unavailable"
    assert "Input/output error" in result.error.message
    assert not canary.exists()
    monkeypatch.undo()
    assert verify(setup.state / "audit.jsonl").ok  # the refusal's own line, no false alarm


def test_without_fallocate_an_intent_line_is_synced_before_the_tool_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[list[dict[str, Any]]] = []
    log = tmp_path / "state" / "audit.jsonl"

    def unsupported(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))

    def handler(*, input: Any, context: Any) -> str:
        seen.append([json.loads(line) for line in log.read_bytes().splitlines()])
        return "done"

    monkeypatch.setattr(audit, "_fallocate_keep_size", unsupported)
    setup = registry_for(tmp_path)
    setup.registry.register("touch", NOOP_SCHEMA, handler, description="x")
    result = setup.registry.call("touch", {})
    assert result.ok
    (intent,) = seen[0]  # on disk before the tool started
    assert intent["status"] == "started" and intent["decision"] == "allow" and intent["tool"] == "touch"
    lines = [json.loads(line) for line in log.read_bytes().splitlines()]
    assert [line["status"] for line in lines] == ["started", "ok"]
    assert lines[1]["intent"] == intent["id"] and lines[1]["id"] == result.audit_id
    assert verify(log).ok


def test_reservations_of_other_processes_are_counted_and_end_with_them(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    mine = JsonlAudit(log)
    script = (
        "import sys; from pathlib import Path; from tooldir.run.audit import JsonlAudit, AuditEvent\n"
        f"s = JsonlAudit(Path({str(log)!r}))\n"
        "e = AuditEvent('t', 'user', None, 'sha256:x', 'allow', None, 'started', None, 0.0)\n"
        "held = [s.reserve(e) for _ in range(3)]\n"
        "print('held', flush=True); sys.stdin.read()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdout is not None and child.stdout.readline() == "held\n"
        reservation = mine.reserve(event(0, "started"))
        assert mine._outstanding() == 4
        allocated = os.stat(log).st_blocks * 512
        assert allocated >= 4 * LINE_RESERVE  # room for all four lines past the (empty) log's end
        assert os.stat(log).st_size == 0
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
    assert mine._outstanding() == 1  # the child's reservations ended with it
    mine.record_reserved(event(1), reservation)
    assert mine._outstanding() == 0
    assert verify(log).ok


def test_a_state_dir_deleted_between_calls_is_made_again_and_its_new_log_verifies(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    setup = registry_for(tmp_path)
    setup.registry.register("touch", NOOP_SCHEMA, canary_tool(canary), description="x")
    assert setup.registry.call("touch", {}).ok
    subprocess.run(["rm", "-rf", str(setup.state)], check=True)
    result = setup.registry.call("touch", {})
    assert result.ok, result.error
    report = verify(setup.state / "audit.jsonl")
    assert report.ok and report.lines == 1, report.to_json()


def test_a_sandboxed_tool_still_runs_and_is_logged_after_the_state_dir_was_deleted_under_a_live_registry(
    tmp_path: Path,
) -> None:
    require_sandbox()
    make_tool(tmp_path / "user", "echo")
    setup = registry_for(tmp_path, user_dir=tmp_path / "user")
    assert setup.registry.call("echo", {"text": "a"}).ok
    subprocess.run(["rm", "-rf", str(setup.state)], check=True)  # as serve runs on
    for text in ("b", "c"):
        result = setup.registry.call("echo", {"text": text})
        assert result.ok, result.error
    report = verify(setup.state / "audit.jsonl")
    assert report.ok and report.lines == 2, report.to_json()


def test_concurrent_calls_each_reserve_and_release_their_room_and_the_chain_holds_every_line(tmp_path: Path) -> None:
    sink = JsonlAudit(tmp_path / "state" / "audit.jsonl")
    setup = registry_for(tmp_path, audit=sink)
    setup.registry.register("noop", NOOP_SCHEMA, lambda *, input, context: "x", description="x")
    results: list[bool] = []

    def work() -> None:
        for _ in range(20):
            results.append(setup.registry.call("noop", {}).ok)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [True] * 160
    assert sink._outstanding() == 0  # every reservation ended with its line
    report = verify(sink.path)
    assert report.ok and report.lines == 160, report.to_json()


def test_an_io_error_on_the_append_after_the_run_withholds_the_result_names_the_log_and_tears_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup = registry_for(tmp_path)
    setup.registry.register("noop", NOOP_SCHEMA, lambda *, input, context: "secret result", description="x")
    assert setup.registry.call("noop", {}).ok
    log = setup.state / "audit.jsonl"
    before = log.read_bytes()
    real_write = os.write
    writes = {"n": 0}

    def half_then_eio(fd: int, data: bytes | memoryview) -> int:
        if os.fstat(fd).st_ino != os.stat(log).st_ino:
            return real_write(fd, data)
        writes["n"] += 1
        if writes["n"] == 1:
            return real_write(fd, bytes(data)[: len(data) // 2])  # the device takes half the line
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(audit.os, "write", half_then_eio)
    result = setup.registry.call("noop", {})
    monkeypatch.undo()
    assert not result.ok and result.content is None and result.error is not None
    assert result.error.code == "audit-failed"
    assert "(errno 5)" in result.error.message and str(log) in result.error.message
    assert log.read_bytes() == before
    assert setup.registry.call("noop", {}).ok
    assert verify(log).ok


def test_an_audit_line_keeps_the_first_connections_that_fit_and_counts_the_rest() -> None:
    refused = "not-allowed: " + "a" * 200 + ":443 is not on the tool's network allowlist"
    connections = [
        {"host": "a" * 200, "port": 443, "address": None, "bytes_up": 0, "bytes_down": 0, "refused": refused}
    ] * 100
    fields = bounded_fields({"network": connections})
    kept = fields["network"]
    assert 0 < len(kept) < 64  # long refusals: the byte bound, not the count, ends the list
    assert fields["network_more"] == 100 - len(kept)
    assert len(json.dumps(kept, separators=(",", ":"))) <= NETWORK_LINE_BYTES
    short = bounded_fields({"network": [{"host": "h", "port": 1, "refused": None}] * 100})
    assert len(short["network"]) == NETWORK_CAP and short["network_more"] == 100 - NETWORK_CAP
