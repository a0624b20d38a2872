"""The chain head beside the audit log: truncation at the end is detected, the appender chains from
the head (never from a bounded tail read), an older log without a head migrates, and a copy of the
head kept elsewhere can be checked with ``expect_head``."""

from __future__ import annotations

import hashlib
import json
import stat
from pathlib import Path

import pytest

from tooldir.run.audit import AuditEvent, JsonlAudit, parse_head, verify
from tooldir.state import AUDIT_HEAD, ChainHead, audit_head_path, load_chain_head, save_chain_head


def event(n: int) -> AuditEvent:
    return AuditEvent(f"tool{n}", "user", None, "sha256:x", "allow", None, "ok", None, 1.0)


def write_log(path: Path, count: int) -> None:
    sink = JsonlAudit(path)
    for n in range(count):
        sink.record(event(n))


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def keep_lines(path: Path, count: int) -> None:
    path.write_bytes(b"".join(lines(path)[:count]))


def head_of(path: Path) -> ChainHead:
    head = load_chain_head(audit_head_path(path))
    assert head is not None
    return head


def codes(report: object) -> list[tuple[int | None, str, str]]:
    return [(p.line, p.code, p.severity) for p in report.problems]  # type: ignore[attr-defined]


def test_every_append_records_the_head_beside_the_log_privately(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 3)
    head = head_of(path)
    last = json.loads(lines(path)[-1])
    assert audit_head_path(path) == tmp_path / AUDIT_HEAD
    assert (head.seq, head.hash, head.size) == (3, last["hash"], path.stat().st_size)
    assert stat.S_IMODE(audit_head_path(path).stat().st_mode) == 0o600
    report = verify(path)
    assert report.ok and report.problems == () and (report.head_seq, report.head) == (3, head.hash)


@pytest.mark.parametrize("kept", [0, 2, 4])
def test_lines_removed_at_the_end_are_reported_as_missing(tmp_path: Path, kept: int) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 5)
    keep_lines(path, kept)
    report = verify(path)
    assert not report.ok
    assert codes(report) == [(kept + 1, "missing-lines", "error")]
    assert f"{5 - kept} line" in (report.reason or "")  # "N lines missing at the end"


def test_a_log_deleted_entirely_while_its_head_remains_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 3)
    path.unlink()
    report = verify(path)
    assert not report.ok and codes(report) == [(1, "log-missing", "error")]


def test_a_missing_head_beside_a_non_empty_log_is_an_error_unless_allowed(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 2)
    audit_head_path(path).unlink()
    report = verify(path)
    assert not report.ok and report.reason_code == "head-missing"
    lenient = verify(path, require_head=False)
    assert lenient.ok and codes(lenient) == [(None, "head-missing", "warning")]


def test_no_log_and_no_head_is_an_empty_valid_log(tmp_path: Path) -> None:
    report = verify(tmp_path / "audit.jsonl")
    assert report.ok and report.lines == 0 and report.problems == ()


def test_a_damaged_head_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 2)
    audit_head_path(path).write_text('{"seq": "two"}')
    assert verify(path).reason_code == "head-invalid"


def test_an_oversized_head_file_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 2)
    with audit_head_path(path).open("ab") as fh:
        fh.write(b" " * 10)
    assert verify(path).reason_code == "head-invalid"


def test_a_torn_head_write_leaves_the_previous_head(tmp_path: Path) -> None:
    """Slot seq % 2 is written in place; the other slot keeps the previous head."""
    path = tmp_path / "audit.jsonl"
    write_log(path, 3)
    head_file = audit_head_path(path)
    data = bytearray(head_file.read_bytes())
    newest = 256 * (3 % 2)
    data[newest + 20 : newest + 40] = b"X" * 20  # line 3's head half written
    head_file.write_bytes(bytes(data))
    assert head_of(path).seq == 2
    report = verify(path)
    assert report.ok and codes(report) == [(3, "head-behind", "warning")]
    JsonlAudit(path).record(event(3))  # the next append repairs it
    assert head_of(path).seq == 4 and verify(path).problems == ()


def test_a_head_slot_whose_checksum_does_not_match_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 2)
    head_file = audit_head_path(path)
    data = head_file.read_bytes()
    forged = data.replace(b'"seq":2,', b'"seq":9,')  # seq changed, checksum left as it was
    head_file.write_bytes(forged)
    assert head_of(path).seq == 1


def test_a_zero_filled_head_file_counts_as_no_head(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 2)
    audit_head_path(path).write_bytes(b"\0" * 512)
    assert load_chain_head(audit_head_path(path)) is None
    assert verify(path).reason_code == "head-missing"


def test_a_rewritten_log_of_the_same_length_is_caught_by_the_head(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 3)
    head = head_of(path)
    path.unlink()
    audit_head_path(path).unlink()
    write_log(path, 3)  # a whole new, self-consistent chain
    save_chain_head(audit_head_path(path), head)  # ...but the old head is still there
    report = verify(path)
    assert (report.broken_line, report.reason_code) == (3, "head-mismatch")


def test_the_appender_chains_from_the_head_so_a_truncation_stays_visible(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 4)
    keep_lines(path, 2)
    JsonlAudit(path).record(event(9))  # another process: no cached state
    assert json.loads(lines(path)[-1])["seq"] == 5
    report = verify(path)
    assert (report.broken_line, report.reason_code) == (3, "seq-mismatch")


def test_a_long_line_of_an_older_log_does_not_restart_the_chain(tmp_path: Path) -> None:
    """A version-1 log (no head) whose last line is over 64 KiB: the next append continues it."""
    path = tmp_path / "audit.jsonl"
    body = {"v": 1, "seq": 1, "id": "a", "tool": "x" * 70_000, "prev": "0" * 64}
    form = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    body["hash"] = hashlib.sha256(form.encode()).hexdigest()
    path.write_bytes(json.dumps(body, sort_keys=True, separators=(",", ":")).encode() + b"\n")
    JsonlAudit(path).record(event(1))
    JsonlAudit(path).record(event(2))
    assert [json.loads(x)["seq"] for x in lines(path)] == [1, 2, 3]
    report = verify(path)
    assert report.ok and report.problems == () and head_of(path).seq == 3


def test_an_older_log_without_a_head_gets_one_at_its_next_append(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 3)
    audit_head_path(path).unlink()
    JsonlAudit(path).record(event(3))
    assert head_of(path).seq == 4
    assert verify(path).ok and verify(path).problems == ()


def test_a_head_left_behind_by_a_crash_is_a_warning_and_the_next_append_repairs_it(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 2)
    before = audit_head_path(path).read_bytes()
    JsonlAudit(path).record(event(2))
    audit_head_path(path).write_bytes(before)  # as if the head update was lost
    report = verify(path)
    assert report.ok and codes(report) == [(3, "head-behind", "warning")]
    JsonlAudit(path).record(event(3))
    assert [json.loads(x)["seq"] for x in lines(path)] == [1, 2, 3, 4]
    assert verify(path).problems == ()


def test_a_torn_last_line_stays_on_its_own_line_after_the_next_append(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 2)
    path.write_bytes(path.read_bytes()[:-20])
    JsonlAudit(path).record(event(2))
    assert len(lines(path)) == 3
    assert verify(path).broken_line == 2


def test_the_expected_head_matches_a_log_that_grew_since(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 3)
    kept = head_of(path)
    write_log(path, 2)
    assert verify(path, expect_head=parse_head(kept.text)).ok
    assert verify(path, expect_head=parse_head(kept.hash)).ok


def test_the_expected_head_catches_a_truncation_the_local_head_hides(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 5)
    shipped = head_of(path)
    keep_lines(path, 3)
    audit_head_path(path).unlink()
    save_chain_head(audit_head_path(path), ChainHead(3, json.loads(lines(path)[-1])["hash"], path.stat().st_size))
    assert verify(path).ok  # the attacker fixed the local head too
    report = verify(path, expect_head=parse_head(shipped.text))
    assert (report.ok, report.broken_line, report.reason_code) == (False, 4, "missing-lines")
    by_hash = verify(path, expect_head=parse_head(shipped.hash))
    assert by_hash.reason_code == "expected-head-not-found"


def test_the_expected_head_catches_a_rewritten_log(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 3)
    shipped = head_of(path)
    path.unlink()
    audit_head_path(path).unlink()
    write_log(path, 4)
    report = verify(path, expect_head=parse_head(shipped.text))
    assert (report.broken_line, report.reason_code) == (3, "head-mismatch")


@pytest.mark.parametrize("text", ["", "12", "12:abc", "x:" + "0" * 64, "0" * 63, "-1:" + "0" * 64])
def test_a_malformed_expected_head_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="SEQ:HASH"):
        parse_head(text)


def test_verify_json_carries_both_heads_and_the_problems(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 3)
    keep_lines(path, 1)
    doc = verify(path).to_json()
    assert doc["head"]["seq"] == 1 and doc["recorded_head"]["seq"] == 3
    assert doc["broken_line"] == 2 and doc["reason_code"] == "missing-lines"
    assert [p["code"] for p in doc["problems"]] == ["missing-lines"]


def test_registry_calls_with_a_70000_character_name_keep_one_chain_across_processes(tmp_path: Path) -> None:
    from regkit import registry_for

    first = registry_for(tmp_path)
    assert first.registry.call("x" * 70_000, {}).error.code == "unknown-tool"  # type: ignore[union-attr]
    second = registry_for(tmp_path)  # the next process: nothing cached
    assert second.registry.call("y", {}).audit_id is not None
    log = first.state / "audit.jsonl"
    assert [json.loads(x)["seq"] for x in lines(log)] == [1, 2]
    assert verify(log).ok


def test_a_registry_call_with_lone_surrogates_in_the_name_is_audited(tmp_path: Path) -> None:
    from regkit import registry_for

    setup = registry_for(tmp_path)
    result = setup.registry.call("evil\udcff\ud800", {"k": "\ud800"})
    assert result.error is not None and result.error.code == "unknown-tool" and result.audit_id is not None
    record = json.loads(lines(setup.state / "audit.jsonl")[0])
    # the registry writes an odd name escaped (repr style), identified by the sha256 of its raw bytes
    raw = "evil\udcff\ud800".encode("utf-8", "surrogatepass")
    assert record["tool"] == "evil\\udcff\\ud800"
    assert record["tool_sha256"] == "sha256:" + hashlib.sha256(raw).hexdigest()
    assert verify(setup.state / "audit.jsonl").ok


def test_verify_beside_a_busy_writer_sees_one_consistent_snapshot(tmp_path: Path) -> None:
    import threading

    path = tmp_path / "audit.jsonl"
    write_log(path, 1)
    done = threading.Event()

    def writer() -> None:
        sink = JsonlAudit(path)
        for n in range(150):
            sink.record(event(n))
        done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    reports = []
    while not done.is_set():
        reports.append(verify(path))
    thread.join(timeout=30)
    assert reports and all(r.ok and r.problems == () for r in reports), [r.problems for r in reports if r.problems][:1]


def test_a_torn_append_whose_head_update_was_lost_is_reported_and_the_chain_goes_on_from_the_head(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 2)
    before = audit_head_path(path).read_bytes()
    JsonlAudit(path).record(event(2))
    audit_head_path(path).write_bytes(before)  # the crash: head not updated...
    path.write_bytes(path.read_bytes()[:-15])  # ...and line 3 only half written
    JsonlAudit(path).record(event(3))
    assert (verify(path).broken_line, verify(path).reason_code) == (3, "invalid-json")
    content = lines(path)
    path.write_bytes(b"".join(content[:2] + content[3:]))  # the operator removes the torn line
    assert verify(path).ok and verify(path).problems == ()


@pytest.mark.parametrize("tail", [b"[" * 100_000 + b"\n", b'{"seq": 1, "ha', b"\n\n"], ids=["deep", "torn", "blank"])
def test_odd_bytes_at_the_end_of_a_headless_log_never_stop_the_writer(tmp_path: Path, tail: bytes) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_bytes(tail)
    JsonlAudit(path).record(event(0))
    assert lines(path)[-1].endswith(b"}\n") and not verify(path).ok  # the damage is reported, not hidden


def test_a_chain_restarted_after_damage_is_not_outranked_by_an_older_head_slot(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 6)
    path.write_bytes(path.read_bytes() + b"garbage line\n")  # appended after the head: no seq in it
    JsonlAudit(path).record(event(7))  # chains to the damaged line's bytes, restarting at seq 1
    assert json.loads(lines(path)[-1])["seq"] == 1
    assert head_of(path).seq == 1  # not the older slot's 5 or 6
    JsonlAudit(path).record(event(8))
    assert [json.loads(x)["seq"] for x in lines(path)[-2:]] == [1, 2]
    assert verify(path).broken_line == 7
