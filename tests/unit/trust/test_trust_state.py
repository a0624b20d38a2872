from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tooldir import state as st
from tooldir.errors import StateError
from tooldir.state import Approval


def approval(path: str, digest: str = "sha256:" + "a" * 64, key: str | None = None) -> Approval:
    return Approval(path, "echo", digest, "2026-06-01T00:00:00Z", key, (("run.py", "b" * 64),))


def test_approvals_round_trip_with_files_and_key(tmp_path: Path) -> None:
    st.record_approval(tmp_path, approval("/p/echo", key="minisign:0123456789ABCDEF"))
    assert st.load_approvals(tmp_path) == {"/p/echo": approval("/p/echo", key="minisign:0123456789ABCDEF")}
    assert [a.path for a in st.remove_approvals(tmp_path, ["/p/echo", "/p/other"])] == ["/p/echo"]
    assert st.load_approvals(tmp_path) == {}


def test_crash_mid_write_leaves_the_old_approvals_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    st.record_approval(tmp_path, approval("/p/echo"))
    before = (tmp_path / "approvals.json").read_bytes()

    def crash(*_: Any, **__: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="disk full"):
        st.record_approval(tmp_path, approval("/p/other"))
    assert (tmp_path / "approvals.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock", "approvals.json"]


def test_high_water_marks_only_rise_and_unchanged_marks_write_nothing(tmp_path: Path) -> None:
    assert st.record_versions(tmp_path, [("minisign:A", "echo", 3), ("ssh:SHA256:x", "echo", 1)]) == [
        ("minisign:A", "echo", 3),
        ("ssh:SHA256:x", "echo", 1),
    ]
    assert st.record_versions(tmp_path, [("minisign:A", "echo", 2)]) == []
    mtime = (tmp_path / "versions.json").stat().st_mtime_ns
    assert st.record_versions(tmp_path, [("minisign:A", "echo", 3)]) == []
    assert (tmp_path / "versions.json").stat().st_mtime_ns == mtime
    assert st.load_high_water(tmp_path) == {("minisign:A", "echo"): 3, ("ssh:SHA256:x", "echo"): 1}
    assert (tmp_path / "versions.json").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"{not json", id="not-json"),
        pytest.param(b"[]", id="not-an-object"),
        pytest.param(json.dumps({"marks": {"k": {"echo": -1}}}).encode(), id="negative"),
        pytest.param(json.dumps({"marks": {"k": {"echo": "3"}}}).encode(), id="string-version"),
        pytest.param(json.dumps({"marks": {"k": 3}}).encode(), id="not-nested"),
    ],
)
def test_corrupt_high_water_file_is_a_state_error_naming_the_file(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "versions.json").write_bytes(content)
    with pytest.raises(StateError) as caught:
        st.load_high_water(tmp_path)
    assert caught.value.path == str(tmp_path / "versions.json")
