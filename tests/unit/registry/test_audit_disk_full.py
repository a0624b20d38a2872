"""A failed audit append leaves no torn line (issue 23 item 10): once space is back, the chain verifies."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from tooldir.run import audit
from tooldir.run.audit import AuditEvent, JsonlAudit, verify


def event(n: int) -> AuditEvent:
    return AuditEvent(f"tool{n}", "user", None, "sha256:x", "allow", None, "ok", None, 1.0)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_a_short_write_then_an_error_is_truncated_back_and_the_chain_verifies_once_space_is_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    path = tmp_path / "audit.jsonl"
    sink = JsonlAudit(path)
    sink.record(event(1))
    before = path.read_bytes()
    real_write = os.write
    calls = {"n": 0}

    def full_disk(fd: int, data: bytes | memoryview) -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            return real_write(fd, bytes(data)[: len(data) // 2])  # the disk takes half the line
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(audit.os, "write", full_disk)
    with pytest.raises(OSError) as caught:
        sink.record(event(2))
    assert caught.value.errno == code
    monkeypatch.setattr(audit.os, "write", real_write)
    assert path.read_bytes() == before  # no torn partial line left behind
    sink.record(event(3))  # space is back
    report = verify(path)
    assert report.ok, report.to_json()
    assert len(path.read_bytes().splitlines()) == 2
