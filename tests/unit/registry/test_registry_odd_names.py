"""Malformed tool names and inputs: always an error result and one audit line, never a traceback."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from regkit import FakeSandbox, registry_for
from toolkit import make_tool

from tooldir.run.audit import AUDIT_FILE, verify
from tooldir.run.registry import AUDIT_NAME_MAX, audit_name

ODD_NAMES: list[Any] = [
    "\udcff",  # os.fsdecode of a non-UTF-8 byte, or an MCP client's "\udcff"
    "echo\udcff",
    "\ud800\udc00x",
    "x\x00\x1b[2J",
    "é" * 10,
    "a" * 100_000,
    "",
    5,
    None,
    b"echo",
]


def audit_lines(state: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (state / AUDIT_FILE).read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("name", ODD_NAMES, ids=lambda n: repr(n)[:20])
def test_an_odd_tool_name_is_unknown_tool_with_exactly_one_valid_audit_line(tmp_path: Path, name: Any) -> None:
    user = tmp_path / "user"
    make_tool(user, "echo")
    box = FakeSandbox()
    setup = registry_for(tmp_path, user_dir=user, sandbox=box)
    result = setup.registry.call(name, {})
    assert not result.ok and result.error is not None and result.error.code == "unknown-tool"
    result.error.message.encode()  # printable anywhere: no lone surrogates
    lines = audit_lines(setup.state)
    assert len(lines) == 1 and lines[0]["id"] == result.audit_id
    assert lines[0]["error_code"] == "unknown-tool" and lines[0]["status"] == "denied"
    assert len(lines[0]["tool"]) <= AUDIT_NAME_MAX and lines[0]["tool_sha256"].startswith("sha256:")
    assert verify(setup.state / AUDIT_FILE).ok
    assert box.requests == []


def test_the_audit_identity_of_a_capped_name_is_the_sha256_of_its_raw_bytes() -> None:
    long = "b" * 1000
    shown, digest = audit_name(long)
    assert digest == "sha256:" + hashlib.sha256(long.encode()).hexdigest()
    assert len(shown) == AUDIT_NAME_MAX and shown.endswith("...")
    assert audit_name("\udcff") == ("\\udcff", "sha256:" + hashlib.sha256(b"\xed\xb3\xbf").hexdigest())
    assert audit_name("\udcfe")[1] != audit_name("\udcff")[1]


def test_a_valid_name_is_audited_as_is_without_a_digest(tmp_path: Path) -> None:
    setup = registry_for(tmp_path)
    setup.registry.call("no_such_tool", {})
    (line,) = audit_lines(setup.state)
    assert line["tool"] == "no_such_tool" and "tool_sha256" not in line


@pytest.mark.parametrize("bad", [{"text": "\udcff"}, {"\udcff": "x"}, {"text": ["ok", {"k": "\ud800"}]}])
def test_an_input_with_lone_surrogates_is_invalid_input_and_audited(tmp_path: Path, bad: dict[str, Any]) -> None:
    user = tmp_path / "user"
    make_tool(user, "echo")
    box = FakeSandbox()
    setup = registry_for(tmp_path, user_dir=user, sandbox=box)
    result = setup.registry.call("echo", bad)
    assert result.error is not None and result.error.code == "invalid-input"
    (line,) = audit_lines(setup.state)
    assert line["error_code"] == "invalid-input" and line["tool"] == "echo"
    assert box.requests == [] and verify(setup.state / AUDIT_FILE).ok


def test_a_failure_inside_tooldir_is_an_internal_error_result_and_audited(tmp_path: Path) -> None:
    class Broken:
        def check(self, request: object) -> None:
            raise RuntimeError("boom")

    user = tmp_path / "user"
    make_tool(user, "echo")
    setup = registry_for(tmp_path, user_dir=user, sandbox=FakeSandbox())
    setup.registry._permissions = Broken()
    result = setup.registry.call("echo", {"text": "x"})
    assert result.error is not None and result.error.code == "internal-error"
    (line,) = audit_lines(setup.state)
    assert line["error_code"] == "internal-error" and line["decision"] == "deny"


@pytest.mark.parametrize("raw_name", [b"\xff", b"echo\xff\xfe", b"\xed\xb3\xbf"], ids=["ff", "suffix", "cesu"])
def test_tooldir_run_with_a_non_utf8_name_exits_2_with_a_json_error_and_an_audit_line(
    tmp_path: Path, raw_name: bytes
) -> None:
    user = tmp_path / "user"
    make_tool(user, "echo")
    state = tmp_path / "state"
    argv = [os.fsencode(sys.executable), b"-m", b"tooldir", b"run", raw_name, b"--input", b"{}"]
    argv += [b"--user-dir", os.fsencode(user), b"--project", os.fsencode(tmp_path), b"--state-dir", os.fsencode(state)]
    for extra in ([b"--json"], []):
        proc = subprocess.run(argv + extra, capture_output=True, timeout=60, cwd=tmp_path, check=False)
        assert proc.returncode == 2, proc.stderr
        assert b"Traceback" not in proc.stderr and b"Traceback" not in proc.stdout
    out = json.loads(subprocess.run([*argv, b"--json"], capture_output=True, timeout=60, check=False).stdout)
    assert out["ok"] is False and out["error"]["code"] == "unknown-tool" and out["audit_id"]
    lines = audit_lines(state)
    assert len(lines) == 3 and {ln["error_code"] for ln in lines} == {"unknown-tool"}
    assert lines[-1]["id"] == out["audit_id"] and verify(state / AUDIT_FILE).ok
