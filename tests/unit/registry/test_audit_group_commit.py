"""Group commit of the audit log (issue 14 item 6): calls that arrive together share one fdatasync,
each caller returns only once its own line is on disk, a crash never leaves a torn chain, and the
``audit.durability`` policy key can (visibly) trade the sync away."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from shared_helpers import kill_writer_after

import tooldir.run.audit as audit_module
from tooldir.policy import AuditPolicy, Policy
from tooldir.run.audit import AuditEvent, JsonlAudit, verify
from tooldir.run.registry import Registry
from tooldir.snapshot.loader import Loader, make_config
from tooldir.snapshot.store import SnapshotStore

THREADS = 8
PER_THREAD = 15


def event(n: int) -> AuditEvent:
    return AuditEvent(f"tool{n}", "user", None, "sha256:x", "allow", None, "ok", None, 1.0)


class SlowSync:
    """A stand-in for os.fdatasync that takes a while (so calls pile up behind it) and remembers
    how far the log was synced."""

    def __init__(self, pause_s: float = 0.005, fail: OSError | None = None) -> None:
        self.calls = 0
        self.synced = 0
        self.pause_s = pause_s
        self.fail = fail
        self._lock = threading.Lock()

    def __call__(self, fd: int) -> None:
        size = os.fstat(fd).st_size
        time.sleep(self.pause_s)
        if self.fail is not None:
            raise OSError(self.fail.errno, self.fail.strerror)  # a fresh one per call, as the OS does
        with self._lock:
            self.calls += 1
            self.synced = max(self.synced, size)


def burst(sink: JsonlAudit, check: Any = None) -> tuple[list[str], list[BaseException]]:
    ids: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(THREADS)

    def work(t: int) -> None:
        start.wait()
        for n in range(PER_THREAD):
            try:
                audit_id = sink.record(event(t * 100 + n))
            except OSError as exc:
                with lock:
                    errors.append(exc)
                continue
            if check is not None:
                check(audit_id)
            with lock:
                ids.append(audit_id)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return ids, errors


def line_end(path: Path, audit_id: str) -> int:
    """Byte offset just past the line holding ``audit_id``."""
    offset = 0
    for raw in path.read_bytes().splitlines(keepends=True):
        offset += len(raw)
        if json.loads(raw)["id"] == audit_id:
            return offset
    raise AssertionError(f"{audit_id} is not in the log")


def test_concurrent_calls_share_fsyncs_and_each_returns_only_once_its_line_is_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync = SlowSync()
    monkeypatch.setattr(audit_module.os, "fdatasync", sync)
    path = tmp_path / "audit.jsonl"
    sink = JsonlAudit(path)
    late: list[str] = []

    def check(audit_id: str) -> None:
        if line_end(path, audit_id) > sync.synced:
            late.append(audit_id)

    ids, errors = burst(sink, check)
    assert not errors and not late
    assert len(set(ids)) == THREADS * PER_THREAD
    assert 1 <= sync.calls < THREADS * PER_THREAD / 2  # batched: far fewer syncs than lines
    report = verify(path)
    assert report.ok and report.lines == THREADS * PER_THREAD and not report.problems
    assert {json.loads(raw)["id"] for raw in path.read_bytes().splitlines()} == set(ids)


def test_one_caller_alone_syncs_every_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sync = SlowSync(pause_s=0)
    monkeypatch.setattr(audit_module.os, "fdatasync", sync)
    sink = JsonlAudit(tmp_path / "audit.jsonl")
    for n in range(5):
        sink.record(event(n))
        assert sync.synced == (tmp_path / "audit.jsonl").stat().st_size
    assert sync.calls == 5


def test_buffered_durability_writes_the_same_chain_without_syncing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync = SlowSync(pause_s=0)
    monkeypatch.setattr(audit_module.os, "fdatasync", sync)
    path = tmp_path / "audit.jsonl"
    ids, errors = burst(JsonlAudit(path, durable=False))
    assert not errors and len(ids) == THREADS * PER_THREAD
    assert sync.calls == 0
    report = verify(path)
    assert report.ok and report.lines == THREADS * PER_THREAD and not report.problems


def test_a_failed_sync_fails_every_caller_of_its_batch_and_the_chain_continues_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync = SlowSync(fail=OSError(errno.EIO, "Input/output error"))
    monkeypatch.setattr(audit_module.os, "fdatasync", sync)
    path = tmp_path / "audit.jsonl"
    sink = JsonlAudit(path)
    ids, errors = burst(sink)
    assert not ids and len(errors) == THREADS * PER_THREAD
    assert all(isinstance(e, OSError) and e.errno == errno.EIO for e in errors)
    assert len({id(e) for e in errors}) == len(errors)  # each caller gets its own exception object
    sync.fail = None
    sink.record(event(999))
    report = verify(path)
    assert report.ok and not report.problems
    assert json.loads(path.read_bytes().splitlines()[-1])["tool"] == "tool999"


def _registry(tmp_path: Path, policy: Policy) -> Registry:
    (tmp_path / "tools").mkdir(exist_ok=True)
    config = make_config(project=None, user_dirs=[tmp_path / "tools"], policy=policy, state_dir=tmp_path / "state")
    registry = Registry(SnapshotStore(Loader(config).load()), policy=policy, state_dir=tmp_path / "state")
    registry.register("noop", {"type": "object"}, lambda *, input, context: None, description="Does nothing.")
    return registry


@pytest.mark.parametrize(("durability", "syncs"), [("fsync", 3), ("buffered", 0)])
def test_the_registry_syncs_audit_lines_as_the_policy_durability_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: Any, syncs: int
) -> None:
    sync = SlowSync(pause_s=0)
    monkeypatch.setattr(audit_module.os, "fdatasync", sync)
    registry = _registry(tmp_path, Policy(audit=AuditPolicy(durability=durability)))
    for _ in range(3):
        assert registry.call("noop", {}).ok
    assert sync.calls == syncs
    report = verify(tmp_path / "state" / "audit.jsonl")
    assert report.ok and report.lines == 3


_WRITER = """
import sys, threading
from tooldir.run.audit import AuditEvent, JsonlAudit
sink = JsonlAudit(sys.argv[1])
def work(t):
    n = 0
    while True:
        n += 1
        sink.record(AuditEvent("t%d_%d" % (t, n), "user", None, "sha256:x", "allow", "r" * (n % 300), "ok", None, 1.0))
for t in range(6):
    threading.Thread(target=work, args=(t,), daemon=True).start()
threading.Event().wait()
"""


@pytest.mark.parametrize("lines_before_kill", [1, 40, 200])
def test_a_writer_killed_mid_burst_leaves_a_chain_that_verifies_and_continues(
    tmp_path: Path, lines_before_kill: int
) -> None:
    path = tmp_path / "audit.jsonl"
    child = kill_writer_after(path, _WRITER, lines_before_kill)
    assert child.returncode == -signal.SIGKILL
    data = path.read_bytes()
    assert data.endswith(b"\n")  # no torn line: every line is either fully there or absent
    report = verify(path)
    assert report.ok, report.problems
    assert report.lines == data.count(b"\n") >= lines_before_kill
    assert {p.code for p in report.problems} <= {"head-behind"}  # killed between a write and its head
    JsonlAudit(path).record(event(1))
    after = verify(path)
    assert after.ok and after.lines == report.lines + 1 and not after.problems
    assert after.recorded_head is not None and after.recorded_head.seq == after.lines
    cli = subprocess.run(
        [sys.executable, "-m", "tooldir", "audit", "verify", "--state-dir", str(tmp_path), "--json"],
        capture_output=True,
        check=False,
        cwd=tmp_path,
    )
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["ok"] is True
