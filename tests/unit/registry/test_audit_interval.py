"""``audit.durability = "interval"`` (issue 14 item 6): an explicit, opt-in, reported weakening.
Lines reach the kernel before their call returns and the disk within ``sync_interval_ms``; the
head only ever names synced lines, so a crash leaves the chain up to the head intact, the lines
after it are reported as unsynced (``head-behind``, a warning), and at most the lines of the last
interval can be lost."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from shared_helpers import kill_writer_after
from test_audit_group_commit import SlowSync, event

import tooldir.run.audit as audit_module
from tooldir.policy import AuditPolicy, Policy
from tooldir.run.audit import JsonlAudit, verify
from tooldir.run.registry import Registry
from tooldir.snapshot.loader import Loader, make_config
from tooldir.snapshot.store import SnapshotStore
from tooldir.state import audit_head_path, load_chain_head


def head_seq(path: Path) -> int:
    head = load_chain_head(audit_head_path(path))
    return 0 if head is None else head.seq


def wait_until(predicate: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.005)
    pytest.fail("timed out")


def test_interval_lines_return_before_any_sync_and_are_synced_with_their_head_within_the_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync = SlowSync(pause_s=0)
    monkeypatch.setattr(audit_module.os, "fdatasync", sync)
    path = tmp_path / "audit.jsonl"
    sink = JsonlAudit(path, sync_interval_s=0.05)
    for n in range(5):
        sink.record(event(n))
    assert path.read_bytes().count(b"\n") == 5  # every line is written before its call returns
    assert sync.calls == 0 and head_seq(path) == 0  # ... none synced yet: the head names no line
    wait_until(lambda: head_seq(path) == 5)
    assert sync.calls == 1 and sync.synced == path.stat().st_size  # one sync for the interval's lines
    report = verify(path)
    assert report.ok and report.lines == 5 and not report.problems
    for raw in path.read_bytes().splitlines():  # the log itself says how its lines were kept
        line = json.loads(raw)
        assert (line["durability"], line["sync_interval_ms"]) == ("interval", 50)
    sink.close()


def test_flush_and_close_sync_at_once_and_a_closed_sink_syncs_every_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync = SlowSync(pause_s=0)
    monkeypatch.setattr(audit_module.os, "fdatasync", sync)
    path = tmp_path / "audit.jsonl"
    sink = JsonlAudit(path, sync_interval_s=0.2)
    sink.record(event(1))
    sink.flush()
    assert sync.calls == 1 and head_seq(path) == 1
    sink.record(event(2))
    sink.close()
    assert sync.calls == 2 and head_seq(path) == 2
    sink.record(event(3))  # after close: synced before it returns
    assert sync.calls == 3 and head_seq(path) == 3
    assert verify(path).ok and not verify(path).problems


@pytest.mark.parametrize("interval", [0.0, 0.01, 0.5, 1.0])
def test_an_interval_outside_50_to_200_ms_is_refused(tmp_path: Path, interval: float) -> None:
    with pytest.raises(ValueError, match="sync_interval_s"):
        JsonlAudit(tmp_path / "audit.jsonl", sync_interval_s=interval)


_EXITS = """
import sys
from tooldir.run.audit import AuditEvent, JsonlAudit
sink = JsonlAudit(sys.argv[1], sync_interval_s=0.2)
for n in range(3):
    sink.record(AuditEvent("t%d" % n, "user", None, "sha256:x", "allow", None, "ok", None, 1.0))
"""


def test_a_process_that_exits_syncs_its_interval_lines_and_records_their_head(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    subprocess.run([sys.executable, "-c", _EXITS, str(path)], check=True, timeout=60)
    assert head_seq(path) == 3  # flushed at exit, well before the 200 ms were up
    report = verify(path)
    assert report.ok and report.lines == 3 and not report.problems


_WRITER = """
import sys, threading
from tooldir.run.audit import AuditEvent, JsonlAudit
sink = JsonlAudit(sys.argv[1], sync_interval_s=0.05)
def work(t):
    n = 0
    while True:
        n += 1
        sink.record(AuditEvent("t%d_%d" % (t, n), "user", None, "sha256:x", "allow", "r" * (n % 300), "ok", None, 1.0))
for t in range(4):
    threading.Thread(target=work, args=(t,), daemon=True).start()
threading.Event().wait()
"""


@pytest.mark.parametrize("lines_before_kill", [1, 300])
def test_a_writer_killed_mid_burst_in_interval_mode_loses_at_most_its_unsynced_lines_and_verify_says_so(
    tmp_path: Path, lines_before_kill: int
) -> None:
    path = tmp_path / "audit.jsonl"
    kill_writer_after(path, _WRITER, lines_before_kill)
    data = path.read_bytes()
    assert data.endswith(b"\n")  # no torn line: a killed tooldir loses nothing it had written
    report = verify(path)
    assert report.ok, report.problems
    assert report.lines == data.count(b"\n") >= lines_before_kill
    head = report.recorded_head
    assert head is not None
    unsynced = report.lines - head.seq
    if unsynced:  # lines after the head: reported as such (a warning), at the first of them
        [problem] = report.problems
        assert (problem.code, problem.severity, problem.line) == ("head-behind", "warning", head.seq + 1)
        assert "interval" in problem.message
    else:
        assert not report.problems
    # a power cut now: at worst, every line after the head (never synced for sure) is gone
    lines = data.splitlines(keepends=True)
    lost = [json.loads(raw) for raw in lines[head.seq :]]
    if lost:  # ... and those are the lines of the last interval only (bounded; slack for a loaded machine)
        span = datetime.fromisoformat(lost[-1]["time"]) - datetime.fromisoformat(lost[0]["time"])
        assert span.total_seconds() < 0.05 + 2.0
    os.truncate(path, head.size)
    after_crash = verify(path)
    assert after_crash.ok and after_crash.lines == head.seq and not after_crash.problems
    sink = JsonlAudit(path, sync_interval_s=0.05)  # and the chain continues from the head
    sink.record(event(1))
    sink.close()
    continued = verify(path)
    assert continued.ok and continued.lines == head.seq + 1 and not continued.problems


def test_the_registry_under_interval_durability_logs_it_at_start_and_writes_it_into_its_lines(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "tools").mkdir()
    policy = Policy(audit=AuditPolicy(durability="interval", sync_interval_ms=50))
    config = make_config(project=None, user_dirs=[tmp_path / "tools"], policy=policy, state_dir=tmp_path / "state")
    with caplog.at_level(logging.WARNING, logger="tooldir"):
        registry = Registry(SnapshotStore(Loader(config).load()), policy=policy, state_dir=tmp_path / "state")
    assert [r.levelno for r in caplog.records if "audit.durability" in r.getMessage()] == [logging.WARNING]
    registry.register("noop", {"type": "object"}, lambda *, input, context: None, description="Does nothing.")
    assert registry.call("noop", {}).ok
    log = tmp_path / "state" / "audit.jsonl"
    wait_until(lambda: head_seq(log) == 1)
    [line] = [json.loads(raw) for raw in log.read_bytes().splitlines()]
    assert (line["durability"], line["sync_interval_ms"]) == ("interval", 50)


def test_a_durable_sink_writes_no_durability_field(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    JsonlAudit(path).record(event(1))
    assert "durability" not in json.loads(path.read_bytes())
