"""Byte-exact verification: a line is valid only if its bytes are the canonical serialisation of its
strictly parsed content; capped and repaired free-text fields; the writer never raises on odd strings."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest

from tooldir._internal.strictjson import loads
from tooldir.run.audit import REASON_CAP, TEXT_CAP, AuditEvent, JsonlAudit, bounded_fields, canonical, verify


def event(n: int, tool: str | None = None, reason: str | None = None) -> AuditEvent:
    return AuditEvent(tool or f"tool{n}", "user", None, "sha256:x", "deny", reason, "denied", "not-active", 1.25)


def write_log(path: Path, count: int) -> None:
    sink = JsonlAudit(path)
    for n in range(count):
        sink.record(event(n, reason="not-active: caf\u00e9 \u202e"))


def rewrite_line(path: Path, index: int, new: bytes) -> None:
    content = path.read_bytes().splitlines(keepends=True)
    content[index] = new
    path.write_bytes(b"".join(content))


def line(path: Path, index: int) -> bytes:
    return path.read_bytes().splitlines(keepends=True)[index]


def test_every_written_line_is_ascii_and_its_own_canonical_form(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 3)
    for raw in path.read_bytes().splitlines():
        assert raw.isascii()
        assert canonical(json.loads(raw)) == raw


def test_a_whitespace_only_edit_is_reported_as_not_canonical(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 4)
    rewrite_line(path, 1, line(path, 1).replace(b'","', b'", "', 1))
    report = verify(path)
    assert (report.ok, report.broken_line, report.reason_code) == (False, 2, "not-canonical")


def test_trailing_whitespace_before_the_newline_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 3)
    rewrite_line(path, 2, line(path, 2)[:-1] + b" \n")
    assert (verify(path).broken_line, verify(path).reason_code) == (3, "not-canonical")


def test_reordered_keys_are_reported_as_not_canonical(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 3)
    record = json.loads(line(path, 1))
    reordered = json.dumps(dict(reversed(list(record.items()))), separators=(",", ":")).encode() + b"\n"
    rewrite_line(path, 1, reordered)
    report = verify(path)
    assert (report.broken_line, report.reason_code) == (2, "not-canonical")


@pytest.mark.parametrize(
    ("old", "new"),
    [(b'"tool":"t', b'"tool":"\\u0074'), (b"\\u00e9", b"\\u00E9"), (b"\\u00e9", "\u00e9".encode())],
    ids=["ascii-letter-escaped", "uppercase-hex", "raw-utf8"],
)
def test_a_different_escape_of_the_same_text_is_reported(tmp_path: Path, old: bytes, new: bytes) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 3)
    raw = line(path, 1)
    assert old in raw
    rewrite_line(path, 1, raw.replace(old, new, 1))
    report = verify(path)
    assert (report.broken_line, report.reason_code) == (2, "not-canonical")


def test_a_forged_duplicate_tool_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 3)
    raw = line(path, 1)
    rewrite_line(path, 1, raw[:-2] + b',"tool":"innocent"}\n')
    report = verify(path)
    assert (report.broken_line, report.reason_code) == (2, "duplicate-key")


def test_a_duplicate_key_placed_first_is_refused_too(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 2)
    raw = line(path, 0)
    rewrite_line(path, 0, b'{"tool":"innocent",' + raw[1:])
    assert (verify(path).broken_line, verify(path).reason_code) == (1, "duplicate-key")


def test_verification_reports_structured_problems(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 2)
    rewrite_line(path, 0, b"not json\n")
    report = verify(path)
    assert report.to_json()["problems"] == [
        {"line": 1, "code": "invalid-json", "severity": "error", "message": report.reason}
    ]


def test_lines_of_the_first_format_still_verify(tmp_path: Path) -> None:
    """Version 1 lines were written with raw UTF-8; they are checked against that form."""
    path = tmp_path / "audit.jsonl"
    body = {"v": 1, "seq": 1, "id": "a", "tool": "caf\u00e9", "prev": "0" * 64}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    body["hash"] = hashlib.sha256(text.encode()).hexdigest()
    path.write_bytes(json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode() + b"\n")
    assert verify(path, require_head=False).ok
    rewrite_line(path, 0, line(path, 0).replace("\u00e9".encode(), b"\\u00e9"))
    assert verify(path, require_head=False).reason_code == "not-canonical"


def test_an_unknown_record_version_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 1)
    rewrite_line(path, 0, line(path, 0).replace(b'"v":2', b'"v":9'))
    assert verify(path).reason_code == "unknown-version"


def test_a_70000_character_tool_name_is_capped_with_its_digest(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    name = "x" * 70_000
    JsonlAudit(path).record(event(0, tool=name))
    record = json.loads(line(path, 0))
    assert record["tool"] == name[:TEXT_CAP]
    assert record["tool_sha256"] == "sha256:" + hashlib.sha256(name.encode()).hexdigest()
    assert record["tool_length"] == 70_000
    assert len(line(path, 0)) < 4096


def test_a_long_reason_is_capped_at_its_own_limit(tmp_path: Path) -> None:
    fields = bounded_fields({"reason": "r" * 5000, "tool": "ok"})
    assert len(fields["reason"]) == REASON_CAP and fields["reason_length"] == 5000
    assert "tool_sha256" not in fields


def test_short_plain_values_are_logged_unchanged_without_digests() -> None:
    fields = bounded_fields(event(1).fields())
    assert fields["tool"] == "tool1" and not any(k.endswith("_length") for k in fields)


def test_lone_surrogates_in_a_tool_name_are_logged_safely(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    name = "evil\ud800name\udfff"
    JsonlAudit(path).record(event(0, tool=name, reason="unknown-tool: no tool named 'evil\ud800'"))
    raw = line(path, 0)
    record = loads(raw[:-1])  # strict: no escaped lone surrogate was written
    assert record["tool"] == "evil\ufffdname\ufffd"
    assert record["tool_sha256"] == "sha256:" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()
    assert "\ufffd" in record["reason"]
    assert verify(path).ok


def test_non_finite_and_non_string_values_never_stop_the_writer(tmp_path: Path) -> None:
    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    path = tmp_path / "audit.jsonl"
    huge = 10**5000  # too long for int-to-str conversion
    odd = AuditEvent(Hostile(), 7, huge, "sha256:x", "deny", None, "denied", None, math.nan)  # type: ignore[arg-type]
    JsonlAudit(path).record(odd)
    record = json.loads(line(path, 0))
    assert record["duration_ms"] is None and record["source"] == 7
    assert record["digest"] == "<unrepresentable int>"
    assert record["tool"].startswith("<unrepresentable")
    assert verify(path).ok


def test_a_line_longer_than_the_bound_is_reported_without_reading_it_whole(tmp_path: Path) -> None:
    from tooldir.run import audit

    path = tmp_path / "audit.jsonl"
    write_log(path, 1)
    with path.open("ab") as fh:
        fh.write(b"x" * (audit._MAX_LAST_LINE + 10) + b"\n")
    report = verify(path)
    assert (report.broken_line, report.reason_code) == (2, "too-long")
