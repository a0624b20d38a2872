"""Stable codes live in one module (issue 13): DESIGN §3's codes are all in tooldir.codes.

That every code tooldir emits is listed there is mypy's job (issue 25): the fields and helpers
that carry a code are typed with the enums of tooldir.codes, so ``mypy --strict`` refuses a
literal that is not a member. The one spot it cannot see is the strict JSON parser, which imports
nothing of tooldir and names its codes as a ``Literal``: the test below keeps that list in step."""

from __future__ import annotations

import re
import typing
from pathlib import Path

from tooldir._internal.strictjson import StrictJSONCode
from tooldir.codes import DESIGN_CODES, DiagnosticCode

#: Codes later issues added to the contract (policy, text, discovery, state).
ISSUE_CODES = frozenset({"policy-weakened", "control-character", "ambiguous-file-name", "state-unwritable"})


def test_every_code_the_strict_json_parser_refuses_with_is_a_diagnostic_code() -> None:
    parsed = set(typing.get_args(StrictJSONCode))
    assert parsed, "StrictJSONCode names no codes"
    assert parsed <= {str(m) for m in DiagnosticCode}


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


def test_a_diagnostic_s_fingerprint_and_json_are_those_of_its_code_s_string() -> None:
    # snapshot ids hash a repr of each diagnostic's fields: a member must count as its plain string
    import json

    from tooldir.model import Diagnostic, Severity
    from tooldir.snapshot.store import diag_entry

    member = Diagnostic(Severity.ERROR, DiagnosticCode.NOT_APPROVED, "m", tool="t")
    text = Diagnostic(Severity.ERROR, "not-approved", "m", tool="t")  # type: ignore[arg-type]
    assert diag_entry(member)[0] == diag_entry(text)[0]
    assert json.dumps(member.to_json()) == json.dumps(text.to_json())
    assert f"{member.code}" == "not-approved"
