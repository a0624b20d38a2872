"""Stable codes live in one module (issue 13): every code any module of tooldir/ emits is in
tooldir.codes, every code there is emitted somewhere, and DESIGN §3's codes are all present."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from codescan import (
    AUDIT_CALLS,
    CALL_ERROR_CALLS,
    CALL_ERROR_KEYWORDS,
    DIAGNOSTIC_CALLS,
    WATCH_CALLS,
    assigned_codes,
    emitted,
    returned_codes,
)

from tooldir.codes import DESIGN_CODES, AuditCode, CallErrorCode, DiagnosticCode, WatchCode

#: Codes later issues added to the contract (policy, text, discovery, state).
ISSUE_CODES = frozenset({"policy-weakened", "control-character", "ambiguous-file-name", "state-unwritable"})


def _diagnostics_emitted() -> set[str]:
    return (
        set(emitted(DIAGNOSTIC_CALLS))
        | returned_codes("read/discover.py", "_open_failure")
        | assigned_codes("read/discover.py")
    )


def _call_errors_emitted() -> set[str]:
    return set(emitted(CALL_ERROR_CALLS, keywords=CALL_ERROR_KEYWORDS)) | returned_codes(
        "deferred/session.py", "authorize"
    )


def _audit_emitted() -> set[str]:
    return set(emitted(AUDIT_CALLS)) | assigned_codes("run/audit.py")


def _watch_emitted() -> set[str]:
    return set(emitted(WATCH_CALLS)) | assigned_codes("snapshot/watch.py")


@pytest.mark.parametrize(
    ("kind", "scan"),
    [
        (DiagnosticCode, _diagnostics_emitted),
        (CallErrorCode, _call_errors_emitted),
        (AuditCode, _audit_emitted),
        (WatchCode, _watch_emitted),
    ],
    ids=["diagnostic", "call-error", "audit", "watch"],
)
def test_every_code_emitted_in_tooldir_is_in_codes_py_and_every_code_there_is_emitted(kind: type, scan: object) -> None:
    found = scan()  # type: ignore[operator]
    listed = {str(member) for member in kind}  # type: ignore[attr-defined]
    assert found - listed == set(), "emitted but missing from tooldir/codes.py"
    assert listed - found == set(), "listed in tooldir/codes.py but emitted nowhere"


def test_the_scan_finds_codes_through_helpers_tuples_and_conditional_expressions() -> None:
    # one of each shape, so a scanner that silently found nothing fails here
    assert "unreadable" in returned_codes("read/discover.py", "_open_failure")
    assert "session:unloaded" in returned_codes("deferred/session.py", "authorize")
    assert {"inotify-limit", "watch-failed"} <= assigned_codes("snapshot/watch.py")
    assert "bad-signature" in emitted(DIAGNOSTIC_CALLS)  # trust.py: run.fail(step, code, ...)
    assert "sandbox-unavailable" in emitted(CALL_ERROR_CALLS, keywords=CALL_ERROR_KEYWORDS)  # code= keyword
    assert "tool-failed" in emitted(CALL_ERROR_CALLS)  # CallError(code or "tool-failed", ...)


def _design_section_3() -> str | None:
    root = Path(__file__).resolve().parents[2]
    for candidate in (root.parent / "shared" / "DESIGN.md", root.parent.parent / "shared" / "DESIGN.md"):
        if candidate.is_file():
            text = candidate.read_text("utf-8")
            match = re.search(r"^## 3\..*?(?=^## 4\.)", text, re.S | re.M)
            return None if match is None else match.group(0)
    return None


def test_every_code_design_section_3_lists_is_a_diagnostic_code() -> None:
    listed = {str(m) for m in DiagnosticCode}
    assert listed >= DESIGN_CODES
    assert listed >= ISSUE_CODES
    section = _design_section_3()
    if section is not None:  # the contract beside the tree; else the vendored copy above is the list
        bullets = [line for line in section.splitlines() if line.startswith("- ")]
        design = {code for line in bullets for code in re.findall(r"`([a-z][a-z-]*)`", line)}
        assert design, "DESIGN §3 lists no codes: the parser is out of date"
        assert design <= listed
        assert design <= DESIGN_CODES, "DESIGN §3 grew: add the new codes to tooldir/codes.py"
