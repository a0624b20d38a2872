"""``tooldir audit verify`` and ``tooldir audit head``: JSON shape, exit codes, truncation, the head
to ship elsewhere and ``--expect-head``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tooldir._cli import main
from tooldir.run.audit import AuditEvent, JsonlAudit

VERIFY_KEYS = ["path", "ok", "lines", "head", "recorded_head", "broken_line", "reason_code", "reason", "problems"]


def write_log(state: Path, count: int) -> Path:
    sink = JsonlAudit(state / "audit.jsonl")
    for n in range(count):
        sink.record(AuditEvent(f"t{n}", "user", None, "sha256:x", "allow", None, "ok", None, 1.0))
    return state / "audit.jsonl"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    return code, capsys.readouterr().out


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any]:
    code, out = run(capsys, *args, "--json")
    return code, json.loads(out)


def test_verify_json_has_the_contract_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_log(tmp_path, 3)
    code, doc = run_json(capsys, "audit", "verify", "--state-dir", str(tmp_path))
    assert code == 0 and list(doc) == VERIFY_KEYS
    assert doc["ok"] is True and doc["lines"] == 3 and doc["problems"] == []
    assert doc["head"] == doc["recorded_head"] and doc["head"]["seq"] == 3


def test_verify_exits_1_and_reports_lines_missing_at_the_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write_log(tmp_path, 5)
    log.write_bytes(b"".join(log.read_bytes().splitlines(keepends=True)[:3]))
    code, doc = run_json(capsys, "audit", "verify", "--state-dir", str(tmp_path))
    assert code == 1
    assert (doc["broken_line"], doc["reason_code"], doc["lines"]) == (4, "missing-lines", 3)
    assert doc["recorded_head"]["seq"] == 5


def test_head_prints_seq_and_hash_that_expect_head_accepts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_log(tmp_path, 2)
    code, out = run(capsys, "audit", "head", "--state-dir", str(tmp_path))
    shipped = out.strip()
    assert code == 0 and shipped.startswith("2:") and len(shipped) == 2 + 64
    write_log(tmp_path, 2)
    assert run(capsys, "audit", "verify", "--state-dir", str(tmp_path), "--expect-head", shipped)[0] == 0
    code, doc = run_json(capsys, "audit", "head", "--state-dir", str(tmp_path))
    assert code == 0 and list(doc) == ["path", "seq", "hash"] and doc["seq"] == 4


def test_expect_head_catches_a_truncation_hidden_from_the_local_head(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write_log(tmp_path, 4)
    shipped = run(capsys, "audit", "head", "--state-dir", str(tmp_path))[1].strip()
    log.write_bytes(b"".join(log.read_bytes().splitlines(keepends=True)[:2]))
    (tmp_path / "audit.head").unlink()
    code, doc = run_json(
        capsys, "audit", "verify", "--state-dir", str(tmp_path), "--allow-missing-head", "--expect-head", shipped
    )
    assert code == 1 and (doc["broken_line"], doc["reason_code"]) == (3, "missing-lines")
    assert [p["code"] for p in doc["problems"]] == ["head-missing", "missing-lines"]


def test_a_missing_head_fails_verify_unless_explicitly_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_log(tmp_path, 2)
    (tmp_path / "audit.head").unlink()
    code, doc = run_json(capsys, "audit", "verify", "--state-dir", str(tmp_path))
    assert code == 1 and doc["reason_code"] == "head-missing"
    code, doc = run_json(capsys, "audit", "verify", "--state-dir", str(tmp_path), "--allow-missing-head")
    assert code == 0 and doc["problems"][0]["severity"] == "warning"
    assert main(["audit", "head", "--state-dir", str(tmp_path)]) == 1
    assert "head-missing" in capsys.readouterr().err


def test_a_malformed_expect_head_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_log(tmp_path, 1)
    assert main(["audit", "verify", "--state-dir", str(tmp_path), "--expect-head", "12:nothex"]) == 2
    assert "--expect-head" in capsys.readouterr().err


def test_the_head_of_an_empty_state_is_the_genesis(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "audit", "head", "--state-dir", str(tmp_path / "none"))
    assert code == 0 and out.strip() == "0:" + "0" * 64


def test_human_verify_output_names_the_broken_line_and_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = write_log(tmp_path, 3)
    content = log.read_bytes().splitlines(keepends=True)
    content[1] = content[1].replace(b'","', b'", "', 1)
    log.write_bytes(b"".join(content))
    code, out = run(capsys, "audit", "verify", "--state-dir", str(tmp_path))
    assert code == 1 and "line 2: not-canonical" in out
