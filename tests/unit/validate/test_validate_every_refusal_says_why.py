"""Every tool that is not active says why: the accept/reject decision and its report come from one
engine, and no regex '$' lets "abc\\n" slip between engines. The invariant (hypothesis): in any
snapshot, every pending, shadowed or rejected record has a diagnostic naming it, in its source."""

from __future__ import annotations

import copy
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from toolkit import make_tool, manifest, project_tools

import tooldir
from tooldir import Snapshot, Status
from tooldir.read.validate import manifest_schema


def load_user(root: Path) -> Snapshot:
    return tooldir.load(project=None, user_dirs=[root], state_dir=root.parent / "state")


@pytest.mark.parametrize("name", ["abc\n", "abc\r\n", "\nabc", "a" * 64 + "\n"], ids=["lf", "crlf", "leading", "long"])
def test_a_name_with_a_line_break_is_invalid_name_with_a_diagnostic(tmp_path: Path, name: str) -> None:
    root = tmp_path / "tools"
    make_tool(root, "abc", raw_manifest=json.dumps(manifest(name)).encode())
    snap = load_user(root)
    assert snap.records("abc")[0].status is Status.REJECTED
    assert ("invalid-name", "/name") in {(d.code, d.pointer) for d in snap.diagnostics if d.tool == "abc"}


def test_an_env_name_with_a_line_break_is_schema_invalid_at_its_pointer(tmp_path: Path) -> None:
    root = tmp_path / "tools"
    execute = {"command": ["python3", "run.py"], "env": ["OK", "PATH\n"]}
    make_tool(root, "env_tool", execute=execute)
    snap = load_user(root)
    assert ("schema-invalid", "/execute/env/1") in {(d.code, d.pointer) for d in snap.diagnostics}


@pytest.mark.parametrize("value", ["abc\n", "PATH\n", "ok_name", "a-b", "", "x" * 65, "é"])
def test_the_published_schema_means_the_same_in_python_jsonschema_and_in_tooldir(value: str) -> None:
    import jsonschema_rs

    name_schema = manifest_schema()["properties"]["name"]
    env_schema = manifest_schema()["properties"]["execute"]["properties"]["env"]["items"]
    for schema in (name_schema, env_schema):
        python_says = jsonschema.Draft202012Validator(schema).is_valid(value)
        rust_says = jsonschema_rs.Draft202012Validator(schema).is_valid(value)
        assert python_says == rust_says, (schema, value)


# -- the invariant ---------------------------------------------------------------------------------

ODD_NAME = st.text(alphabet=st.sampled_from(list("ab_-1 .\n\t\r\x00é\u0430\u200b\u202e$/")), max_size=70)
JUNK = st.sampled_from([1, -1.5, None, True, "x", "", [], {}, ["x"], {"a": 1}])
FIELDS = ["name", "description", "input_schema", "risk", "keywords", "execute"]
BAD_INPUT_SCHEMAS: list[Any] = [
    {"type": "array"},
    {"type": "object", "properties": {"a": {"$schema": "http://127.0.0.1:9/x"}}},
    {"type": "object", "properties": {"a": {"$ref": "file:///nonexistent/tooldir-test.json"}}},
    {"type": "object", "$id": "http://127.0.0.1:9/"},
    {"type": "object", "properties": {"a": {"type": "string", "pattern": "(a+)+\\1"}}},
    {"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}},
    {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},
    {"type": "object", "required": "a"},
    {"type": "object", "properties": {"a": {"type": "strin"}}},
    {"type": "object", "$vocabulary": {}},
]
BAD_COMMANDS: list[Any] = [[], ["/bin/sh", "-c", "x"], ["python3", "../x.py"], ["run.py\n"], ["python3"], [1], "run"]


@st.composite
def mutation(draw: st.DrawFn) -> tuple[str, Any]:
    return draw(
        st.one_of(
            st.tuples(st.just("name"), ODD_NAME),
            st.tuples(st.sampled_from(FIELDS), JUNK).map(lambda kv: ("set:" + kv[0], kv[1])),
            st.tuples(st.just("delete"), st.sampled_from(FIELDS)),
            st.tuples(st.just("unknown"), st.sampled_from(["extra", "$schema", "name ", "NAME"])),
            st.tuples(st.just("input_schema"), st.sampled_from(range(len(BAD_INPUT_SCHEMAS)))),
            st.tuples(st.just("command"), st.sampled_from(range(len(BAD_COMMANDS)))),
            st.tuples(st.just("env"), st.sampled_from(["PATH\n", "A-B", "", "1X", "OK"])),
            st.tuples(st.just("risk"), st.sampled_from(["exec", "external-write", "nuclear", "READ"])),
            st.tuples(st.just("raw"), st.sampled_from([b'{"name": "a", "name": "b"}', b"\xff", b"[]", b"{", b"{}"])),
            st.tuples(st.just("none"), st.none()),
        )
    )


def apply(data: dict[str, Any], change: tuple[str, Any]) -> dict[str, Any] | bytes:
    kind, value = change
    data = copy.deepcopy(data)
    if kind == "name":
        data["name"] = value
    elif kind.startswith("set:"):
        data[kind[4:]] = value
    elif kind == "delete":
        data.pop(value, None)
    elif kind == "unknown":
        data[value] = 1
    elif kind == "input_schema":
        data["input_schema"] = BAD_INPUT_SCHEMAS[value]
    elif kind == "command" and isinstance(data.get("execute"), dict):
        data["execute"]["command"] = BAD_COMMANDS[value]
    elif kind == "env" and isinstance(data.get("execute"), dict):
        data["execute"]["env"] = [value]
    elif kind == "risk":
        data["risk"] = value
    elif kind == "raw":
        return bytes(value)
    return data


PACKAGE = st.tuples(
    st.sampled_from(["user", "project"]),
    st.sampled_from(["alpha", "beta", "read_file", "tool_search", "abc", "a1pha", "Alpha"]),
    st.lists(mutation(), max_size=3),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(PACKAGE, min_size=1, max_size=6))
def test_every_tool_that_is_not_active_has_a_diagnostic_naming_it(packages: list[tuple[str, str, list[Any]]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        user_root = base / "user"
        user_root.mkdir()
        project = base / "project"
        project_root = project_tools(project)
        for source, folder, changes in packages:
            root = user_root if source == "user" else project_root
            if (root / folder).exists():
                continue  # one folder per name and root; collisions come from differing manifest names
            data: dict[str, Any] | bytes = manifest(folder)
            for change in changes:
                data = apply(data, change) if isinstance(data, dict) else data
            raw = data if isinstance(data, bytes) else json.dumps(data).encode()
            make_tool(root, folder, raw_manifest=raw)
            os.chmod(root / folder / "run.py", 0o644)
        snap = tooldir.load(project=project, user_dirs=[user_root], state_dir=base / "state")
        for record in snap.tools:
            if record.status is Status.ACTIVE:
                continue
            named = [d for d in snap.diagnostics if d.tool == record.name and d.source == record.source]
            assert named, f"{record.source}:{record.name} is {record.status} without a diagnostic"
            assert record.diagnostics, f"{record.source}:{record.name} carries no diagnostic"


def test_every_other_name_check_refuses_a_trailing_newline_too() -> None:
    from pydantic import ValidationError

    from tooldir import Manifest
    from tooldir.names import is_valid_name

    assert not is_valid_name("abc\n")
    with pytest.raises(ValidationError):
        Manifest.model_validate(manifest("abc\n"))


def test_a_model_that_cannot_hold_what_the_schema_accepted_is_a_diagnostic_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the model is built from schema-checked data without validating again (tests/unit/validate/
    # test_model_construct.py proves the schema enforces every constraint of the model); should the
    # two ever drift, the tool is rejected with a diagnostic and the load goes on
    from tooldir.read import validate

    def drifted(data: object) -> None:
        raise ValueError("risk 'admin' is not a Risk")

    monkeypatch.setattr(validate, "manifest_from_checked", drifted)
    root = tmp_path / "tools"
    make_tool(root, "abc")
    make_tool(root, "other")
    snap = load_user(root)
    assert [r.status for r in snap.tools] == [Status.REJECTED, Status.REJECTED]
    assert ("schema-invalid", "") in {(d.code, d.pointer) for d in snap.diagnostics if d.tool == "abc"}
