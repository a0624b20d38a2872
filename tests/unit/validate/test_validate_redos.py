"""schema:redos at discovery: patterns are compiled with the linear-time engine the registry uses;
what it cannot compile (backreferences, lookaround, huge programs, too many patterns) is
``invalid-input-schema`` naming the pointer, and Python's ``re`` never sees a tool's pattern."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from toolkit import make_tool

import tooldir
from tooldir import Snapshot, Status
from tooldir._internal.inputschema import MAX_PATTERNS


def load_user(root: Path) -> Snapshot:
    return tooldir.load(project=None, user_dirs=[root], state_dir=root.parent / "state")


def string_with(pattern: str) -> dict[str, Any]:
    return {"type": "object", "properties": {"a": {"type": "string", "pattern": pattern}}}


@pytest.mark.parametrize(
    ("schema", "pointer"),
    [
        (string_with("^(a+)+\\1$"), "/input_schema/properties/a/pattern"),
        (string_with("^(?=(a+)+$)"), "/input_schema/properties/a/pattern"),
        (string_with("(?<!x)y"), "/input_schema/properties/a/pattern"),
        (string_with("[\\s\\S]{1000}[\\s\\S]{1000}"), "/input_schema/properties/a/pattern"),
        ({"type": "object", "patternProperties": {"^(?!x)": {}}}, "/input_schema/patternProperties/^(?!x)"),
        (
            {"type": "object", "$defs": {"d": string_with("(a)\\1")}, "properties": {"b": {"$ref": "#/$defs/d"}}},
            "/input_schema/$defs/d/properties/a/pattern",
        ),
    ],
    ids=["backreference", "lookahead", "lookbehind", "too-large", "pattern-properties-lookahead", "in-defs"],
)
def test_a_pattern_the_linear_engine_cannot_compile_is_invalid_input_schema_at_its_pointer(
    tmp_path: Path, schema: dict[str, Any], pointer: str
) -> None:
    root = tmp_path / "tools"
    make_tool(root, "regex_tool", input_schema=schema)
    make_tool(root, "fine_tool", input_schema=string_with("^[A-Z]+-[0-9]+$"))
    snap = load_user(root)
    found = {(d.code, d.pointer) for d in snap.diagnostics if d.tool == "regex_tool"}
    assert ("invalid-input-schema", pointer) in found
    assert snap.records("regex_tool")[0].status is Status.REJECTED
    assert snap.records("fine_tool")[0].status is Status.ACTIVE


def test_more_patterns_than_the_limit_is_invalid_input_schema(tmp_path: Path) -> None:
    root = tmp_path / "tools"
    props = {f"p{i}": {"type": "string", "pattern": "^a"} for i in range(MAX_PATTERNS + 1)}
    make_tool(root, "many_patterns", input_schema={"type": "object", "properties": props})
    snap = load_user(root)
    assert ("invalid-input-schema", "/input_schema") in {(d.code, d.pointer) for d in snap.diagnostics}


def test_pythons_re_never_runs_a_tools_pattern_during_the_scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = "(zq+)+MARKER"
    seen: list[str] = []
    for fn_name in ("compile", "search", "match", "fullmatch"):
        real = getattr(re, fn_name)

        def spy(pattern: Any, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            text = pattern.pattern if isinstance(pattern, re.Pattern) else pattern
            if isinstance(text, str) and "MARKER" in text:
                seen.append(text)
            return _real(pattern, *args, **kwargs)

        monkeypatch.setattr(re, fn_name, spy)
    root = tmp_path / "tools"
    make_tool(root, "valid_pattern", input_schema=string_with(marker))
    # an invalid manifest takes the reporting path as well
    make_tool(root, "broken_pattern", input_schema=string_with(marker), risk="nuclear", extra_key=1)
    snap = load_user(root)
    assert snap.records("valid_pattern")[0].status is Status.ACTIVE
    assert snap.records("broken_pattern")[0].status is Status.REJECTED
    assert seen == []
