from __future__ import annotations

import hashlib
import json
import stat
import threading
from pathlib import Path

import pytest

from tooldir.run.audit import GENESIS, AuditEvent, JsonlAudit, verify


def event(n: int) -> AuditEvent:
    return AuditEvent(f"tool{n}", "user", None, "sha256:x", "allow", None, "ok", None, 1.0)


def write_log(path: Path, count: int) -> JsonlAudit:
    sink = JsonlAudit(path)
    for n in range(count):
        sink.record(event(n))
    return sink


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def test_a_fresh_log_verifies_and_is_private(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 5)
    report = verify(path)
    assert report.ok and report.lines == 5 and report.broken_line is None
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first = json.loads(lines(path)[0])
    assert first["seq"] == 1 and first["prev"] == GENESIS
    assert {"time", "tool", "source", "digest", "input_sha256", "decision", "reason", "status", "duration_ms"} <= set(
        first
    )


def test_a_missing_log_is_empty_and_valid(tmp_path: Path) -> None:
    assert verify(tmp_path / "none.jsonl").ok


def test_an_edited_line_is_reported_at_that_line(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 5)
    content = lines(path)
    content[2] = content[2].replace(b'"decision":"allow"', b'"decision":"deny"')
    path.write_bytes(b"".join(content))
    report = verify(path)
    assert not report.ok and report.broken_line == 3 and report.reason_code == "hash-mismatch"


def test_an_edit_with_a_recomputed_hash_is_caught_at_the_next_line(tmp_path: Path) -> None:
    import hashlib

    path = tmp_path / "audit.jsonl"
    write_log(path, 4)
    content = lines(path)
    record = json.loads(content[1])
    record["tool"] = "innocent"
    del record["hash"]
    record["hash"] = hashlib.sha256(
        json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    ).hexdigest()
    content[1] = json.dumps(record, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    path.write_bytes(b"".join(content))
    report = verify(path)
    assert not report.ok and report.broken_line == 3 and report.reason_code == "prev-mismatch"


@pytest.mark.parametrize("index", [0, 2, 4], ids=["first", "middle", "before-last"])
def test_a_deleted_line_is_reported_where_the_gap_is(tmp_path: Path, index: int) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 6)
    content = lines(path)
    del content[index]
    path.write_bytes(b"".join(content))
    report = verify(path)
    assert not report.ok and report.broken_line == index + 1


def test_reordered_lines_are_reported_at_the_first_moved_line(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 5)
    content = lines(path)
    content[1], content[3] = content[3], content[1]
    path.write_bytes(b"".join(content))
    report = verify(path)
    assert not report.ok and report.broken_line == 2


def test_a_torn_last_line_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 3)
    path.write_bytes(path.read_bytes()[:-10])
    report = verify(path)
    assert not report.ok and report.broken_line == 3


def test_two_writers_on_one_file_keep_one_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    a, b = JsonlAudit(path), JsonlAudit(path)  # like a CLI run beside a server: separate caches

    def write(sink: JsonlAudit) -> None:
        for n in range(40):
            sink.record(event(n))

    threads = [threading.Thread(target=write, args=(s,)) for s in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    report = verify(path)
    assert report.ok and report.lines == 80


def test_appending_after_damage_keeps_the_damage_visible(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 3)
    content = lines(path)
    content[1] = b'{"garbage": true}\n'
    path.write_bytes(b"".join(content))
    JsonlAudit(path).record(event(9))
    assert verify(path).broken_line == 2


def test_an_event_with_lone_surrogates_is_written_repaired_with_the_raw_sha256_and_the_chain_verifies(
    tmp_path: Path,
) -> None:
    sink = JsonlAudit(tmp_path / "audit.jsonl")
    event = AuditEvent("\udcff", None, None, "sha256:0", "deny", "unknown-tool: \ud800", "denied", "x\udcfe", 0.1)
    sink.record(event)
    record = json.loads((tmp_path / "audit.jsonl").read_text(encoding="utf-8"))
    assert record["tool"] == "\ufffd" and record["error_code"] == "x\ufffd"
    raw = hashlib.sha256("\udcff".encode("utf-8", "surrogatepass")).hexdigest()
    assert record["tool_sha256"] == f"sha256:{raw}"
    assert verify(tmp_path / "audit.jsonl").ok
